#pragma once
// One step's metadata in device memory, uploaded once per step through pinned memory, and the attention work
// plans derived from it (made on first use and reused by every layer).
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "attention/decode_attention.h"
#include "backend/backend.h"
#include "backend/cuda/device_allocator.h"

namespace tern::cuda {

// Sequences with more new tokens than this go through the tiled prefill kernel (when it is built for the head
// size); the others, and every token of the other layers, through split-KV decode attention.
constexpr int32_t kDecodeMaxNewTokens = 8;

struct AttentionPlan {
  Tensor data;  // int32, everything below in one allocation
  // Prefill tiles: (sequence, first row) pairs, longest first so that the heaviest tiles start first.
  const int32_t* tile_seq = nullptr;
  const int32_t* tile_row = nullptr;
  int num_tiles = 0;
  // Decode items: (token, chunk) pairs sorted by token; tokens with their first item.
  const int32_t* item_token = nullptr;
  const int32_t* item_chunk = nullptr;
  int num_items = 0;
  int num_splits = 1;  // items per decode token
  bool all_heads = false;  // kernels::DecodeAttentionPlan
  bool whole_context = false;
  const int32_t* decode_tokens = nullptr;
  const int32_t* token_item_begin = nullptr;
  int num_decode_tokens = 0;
};

// A device buffer that holds a step's metadata at addresses that depend only on the batch's token and sequence
// counts, for steps that replay a recorded graph: the graph's kernels read the same addresses at every replay.
struct FixedMetadata {
  int32_t* buffer = nullptr;
  size_t capacity = 0;  // int32 values
};

class CudaStepContext final : public StepContext {
 public:
  // With `fixed`, every sequence must be a decode chunk (at most kDecodeMaxNewTokens new tokens): the attention
  // plan is made at once and written with the rest, block tables last.
  CudaStepContext(const ForwardBatch& batch, DeviceAllocator& allocator, PinnedStaging& staging,
                  cudaStream_t stream, int num_sms, const kernels::DecodeLayers& decode_layers,
                  const FixedMetadata* fixed = nullptr);

  // Device arrays, int32.
  const int32_t* token_ids() const { return device(token_ids_at_); }
  const int32_t* positions() const { return device(positions_at_); }
  const int32_t* token_seq() const { return device(token_seq_at_); }
  const int32_t* cu_seqlens() const { return device(cu_seqlens_at_); }
  const int32_t* num_cached() const { return device(num_cached_at_); }
  const int32_t* block_tables() const { return device(block_tables_at_); }
  // Where each sequence's table of KV cache group `group` starts in block_tables().
  const int32_t* block_table_offsets(int group) const;
  const int32_t* logit_rows() const { return device(logit_rows_at_); }

  // Fails unless every sequence's block table covers its tokens for this block size (checked once per size).
  void check_block_tables(int64_t block_size) const;
  // with_prefill: sequences longer than kDecodeMaxNewTokens go to prefill tiles; otherwise all tokens decode.
  const AttentionPlan& attention_plan(bool with_prefill) const;

 private:
  const int32_t* device(size_t offset) const { return metadata_.ptr<int32_t>() + offset; }
  // The plan's arrays, appended to `packed`; `plan` gets their offsets (pointers are set by point_plan).
  void pack_plan(bool with_prefill, std::vector<int32_t>& packed, AttentionPlan& plan,
                 size_t offsets[6]) const;
  AttentionPlan make_plan(bool with_prefill) const;

  DeviceAllocator& allocator_;
  PinnedStaging& staging_;
  cudaStream_t stream_;
  int num_sms_ = 1;
  kernels::DecodeLayers decode_layers_;
  std::vector<int32_t> positions_host_;
  Tensor metadata_;
  size_t token_ids_at_ = 0, positions_at_ = 0, token_seq_at_ = 0, cu_seqlens_at_ = 0, num_cached_at_ = 0,
         block_tables_at_ = 0, logit_rows_at_ = 0;
  std::vector<size_t> block_table_offsets_at_;  // per KV cache group
  mutable std::vector<int64_t> checked_block_sizes_;
  mutable std::optional<AttentionPlan> plans_[2];
};

}  // namespace tern::cuda
