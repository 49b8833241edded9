#include "backend/cuda/cuda_step.h"

#include <algorithm>

#include "attention/prefill_attention.h"
#include "core/error.h"

namespace tern::cuda {

namespace {

// Appends `values` to `packed`, returning where they start; each array starts 16-byte aligned.
size_t append(std::vector<int32_t>& packed, const std::vector<int32_t>& values) {
  while (packed.size() % 4 != 0) packed.push_back(0);
  const size_t at = packed.size();
  packed.insert(packed.end(), values.begin(), values.end());
  return at;
}

}  // namespace

CudaStepContext::CudaStepContext(const ForwardBatch& batch, DeviceAllocator& allocator, PinnedStaging& staging,
                                 cudaStream_t stream)
    : StepContext(batch), allocator_(allocator), staging_(staging), stream_(stream) {
  positions_host_ = batch_positions(batch);
  for (int32_t row : batch.logit_rows) {
    if (row < 0 || row >= batch.num_tokens()) fail("forward batch: logit row {} out of range", row);
  }
  std::vector<int32_t> token_seq, cu_seqlens{0}, num_cached, block_tables, block_table_offsets;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    if (seq.num_cached_tokens < 0 || seq.num_new_tokens < 0) {
      fail("forward batch: sequence {} has a negative token count", s);
    }
    token_seq.insert(token_seq.end(), seq.num_new_tokens, static_cast<int32_t>(s));
    cu_seqlens.push_back(cu_seqlens.back() + seq.num_new_tokens);
    num_cached.push_back(seq.num_cached_tokens);
    block_table_offsets.push_back(static_cast<int32_t>(block_tables.size()));
    block_tables.insert(block_tables.end(), seq.block_table.begin(), seq.block_table.end());
  }
  std::vector<int32_t> packed;
  token_ids_at_ = append(packed, batch.token_ids);
  positions_at_ = append(packed, positions_host_);
  token_seq_at_ = append(packed, token_seq);
  cu_seqlens_at_ = append(packed, cu_seqlens);
  num_cached_at_ = append(packed, num_cached);
  block_tables_at_ = append(packed, block_tables);
  block_table_offsets_at_ = append(packed, block_table_offsets);
  logit_rows_at_ = append(packed, batch.logit_rows);
  metadata_ = allocator_.allocate(DType::I32, {static_cast<int64_t>(packed.size())});
  staging_.upload(metadata_.data, packed.data(), packed.size() * sizeof(int32_t), stream_);
}

void CudaStepContext::check_block_tables(int64_t block_size) const {
  if (std::find(checked_block_sizes_.begin(), checked_block_sizes_.end(), block_size) != checked_block_sizes_.end()) {
    return;
  }
  for (const auto& seq : batch().sequences) {
    const int64_t total = static_cast<int64_t>(seq.num_cached_tokens) + seq.num_new_tokens;
    if (static_cast<int64_t>(seq.block_table.size()) * block_size < total) {
      fail("forward batch: a sequence of {} tokens has only {} blocks of {}", total, seq.block_table.size(),
           block_size);
    }
  }
  checked_block_sizes_.push_back(block_size);
}

const AttentionPlan& CudaStepContext::attention_plan(bool with_prefill) const {
  auto& plan = plans_[with_prefill ? 1 : 0];
  if (!plan) plan = make_plan(with_prefill);
  return *plan;
}

AttentionPlan CudaStepContext::make_plan(bool with_prefill) const {
  const ForwardBatch& b = batch();
  std::vector<std::pair<int32_t, int32_t>> tiles;  // (sequence, first row)
  std::vector<int32_t> item_token, item_chunk, decode_tokens, token_item_begin;
  int32_t first_token = 0;
  for (size_t s = 0; s < b.sequences.size(); ++s) {
    const SequenceChunk& seq = b.sequences[s];
    if (with_prefill && seq.num_new_tokens > kDecodeMaxNewTokens) {
      for (int32_t row = 0; row < seq.num_new_tokens; row += kernels::kPrefillTileRows) {
        tiles.emplace_back(static_cast<int32_t>(s), row);
      }
    } else {
      for (int32_t i = 0; i < seq.num_new_tokens; ++i) {
        const int32_t token = first_token + i;
        const int32_t num_keys = seq.num_cached_tokens + i + 1;
        token_item_begin.push_back(static_cast<int32_t>(item_token.size()));
        decode_tokens.push_back(token);
        for (int32_t chunk = 0; chunk * kDecodeChunkTokens < num_keys; ++chunk) {
          item_token.push_back(token);
          item_chunk.push_back(chunk);
        }
      }
    }
    first_token += seq.num_new_tokens;
  }
  token_item_begin.push_back(static_cast<int32_t>(item_token.size()));
  // Tiles of later rows see more keys; starting them first shortens the tail of the launch.
  std::stable_sort(tiles.begin(), tiles.end(), [&](const auto& x, const auto& y) {
    return b.sequences[x.first].num_cached_tokens + x.second > b.sequences[y.first].num_cached_tokens + y.second;
  });
  std::vector<int32_t> tile_seq, tile_row;
  for (const auto& [s, row] : tiles) {
    tile_seq.push_back(s);
    tile_row.push_back(row);
  }

  std::vector<int32_t> packed;
  const size_t tile_seq_at = append(packed, tile_seq);
  const size_t tile_row_at = append(packed, tile_row);
  const size_t item_token_at = append(packed, item_token);
  const size_t item_chunk_at = append(packed, item_chunk);
  const size_t decode_tokens_at = append(packed, decode_tokens);
  const size_t token_item_begin_at = append(packed, token_item_begin);
  AttentionPlan plan;
  plan.data = allocator_.allocate(DType::I32, {static_cast<int64_t>(packed.size())});
  staging_.upload(plan.data.data, packed.data(), packed.size() * sizeof(int32_t), stream_);
  const int32_t* base = plan.data.ptr<int32_t>();
  plan.tile_seq = base + tile_seq_at;
  plan.tile_row = base + tile_row_at;
  plan.num_tiles = static_cast<int>(tile_seq.size());
  plan.item_token = base + item_token_at;
  plan.item_chunk = base + item_chunk_at;
  plan.num_items = static_cast<int>(item_token.size());
  plan.decode_tokens = base + decode_tokens_at;
  plan.token_item_begin = base + token_item_begin_at;
  plan.num_decode_tokens = static_cast<int>(decode_tokens.size());
  return plan;
}

}  // namespace tern::cuda
