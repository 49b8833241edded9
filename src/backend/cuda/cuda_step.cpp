#include "backend/cuda/cuda_step.h"

#include <algorithm>

#include "attention/decode_attention.h"
#include "attention/prefill_attention.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "elementwise/host_copy.h"

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
                                 cudaStream_t stream, int num_sms, const kernels::DecodeLayers& decode_layers,
                                 const FixedMetadata* fixed)
    : StepContext(batch), allocator_(allocator), staging_(staging), stream_(stream), num_sms_(num_sms),
      decode_layers_(decode_layers) {
  positions_host_ = batch_positions(batch);
  for (int32_t row : batch.logit_rows) {
    if (row < 0 || row >= batch.num_tokens()) fail("forward batch: logit row {} out of range", row);
  }
  // Every sequence has a block table per KV cache group; all tables go into one array, group after group, and each
  // group has its own offsets into it.
  const size_t num_groups = batch.sequences.empty() ? 1 : batch.sequences.front().block_tables.size();
  std::vector<int32_t> token_seq, cu_seqlens{0}, num_cached, block_tables;
  std::vector<std::vector<int32_t>> block_table_offsets(num_groups);
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    if (seq.num_cached_tokens < 0 || seq.num_new_tokens < 0) {
      fail("forward batch: sequence {} has a negative token count", s);
    }
    if (fixed && seq.num_new_tokens > kDecodeMaxNewTokens) {
      fail("forward batch: a recorded step has a sequence of {} new tokens (at most {})", seq.num_new_tokens,
           kDecodeMaxNewTokens);
    }
    token_seq.insert(token_seq.end(), seq.num_new_tokens, static_cast<int32_t>(s));
    cu_seqlens.push_back(cu_seqlens.back() + seq.num_new_tokens);
    num_cached.push_back(seq.num_cached_tokens);
    if (seq.block_tables.size() != num_groups || num_groups == 0) {
      fail("forward batch: sequence {} has {} block tables, the first sequence {}", s, seq.block_tables.size(),
           num_groups);
    }
  }
  for (size_t g = 0; g < num_groups; ++g) {
    for (const SequenceChunk& seq : batch.sequences) {
      block_table_offsets[g].push_back(static_cast<int32_t>(block_tables.size()));
      block_tables.insert(block_tables.end(), seq.block_tables[g].begin(), seq.block_tables[g].end());
    }
  }
  // Block tables go last: the arrays before them have sizes fixed by the token and sequence counts, which keeps
  // their offsets the same from step to step (see FixedMetadata).
  std::vector<int32_t> packed;
  token_ids_at_ = append(packed, batch.token_ids);
  positions_at_ = append(packed, positions_host_);
  token_seq_at_ = append(packed, token_seq);
  cu_seqlens_at_ = append(packed, cu_seqlens);
  num_cached_at_ = append(packed, num_cached);
  for (const auto& offsets : block_table_offsets) block_table_offsets_at_.push_back(append(packed, offsets));
  logit_rows_at_ = append(packed, batch.logit_rows);
  AttentionPlan plan;
  size_t plan_offsets[6] = {};
  if (fixed) pack_plan(false, packed, plan, plan_offsets);
  block_tables_at_ = append(packed, block_tables);
  // Deferred tokens travel as -1 - (their row of the previous step's ids), resolved by the upload.
  check_deferred_tokens(batch);
  for (const DeferredToken& token : batch.deferred_tokens) {
    packed[token_ids_at_ + static_cast<size_t>(token.token_index)] = -1 - token.previous_row;
  }
  int32_t* device_base = nullptr;
  if (fixed) {
    if (packed.size() > fixed->capacity) {
      fail("forward batch: {} metadata values exceed the recorded steps' buffer of {}", packed.size(),
           fixed->capacity);
    }
    metadata_.dtype = DType::I32;
    metadata_.shape = {static_cast<int64_t>(fixed->capacity)};
    metadata_.data = fixed->buffer;
    device_base = fixed->buffer;
  } else {
    metadata_ = allocator_.allocate(DType::I32, {static_cast<int64_t>(packed.size())});
    device_base = metadata_.ptr<int32_t>();
  }
  // Ordered after the previous step's sampling on this stream, and before any op of this step.
  const kernels::DeferredIds deferred{token_ids_at_, batch.token_ids.size(),
                                      batch.deferred_tokens.empty() ? nullptr
                                                                    : batch.previous_sampled_ids.ptr<int32_t>()};
  staging_.upload(device_base, packed.data(), packed.size() * sizeof(int32_t), stream_, &deferred);
  if (fixed) {
    plan.tile_seq = plan.tile_row = device_base;
    plan.item_token = device_base + plan_offsets[2];
    plan.item_chunk = device_base + plan_offsets[3];
    plan.decode_tokens = device_base + plan_offsets[4];
    plan.token_item_begin = device_base + plan_offsets[5];
    // Decode chunks only: the plan with prefill tiles is the same plan.
    plans_[0] = plan;
    plans_[1] = plan;
  }
}

const int32_t* CudaStepContext::block_table_offsets(int group) const {
  if (group < 0 || static_cast<size_t>(group) >= block_table_offsets_at_.size()) {
    fail("forward batch: KV cache group {} has no block tables ({} given per sequence)", group,
         block_table_offsets_at_.size());
  }
  return device(block_table_offsets_at_[static_cast<size_t>(group)]);
}

void CudaStepContext::check_block_tables(int64_t block_size) const {
  if (std::find(checked_block_sizes_.begin(), checked_block_sizes_.end(), block_size) != checked_block_sizes_.end()) {
    return;
  }
  for (const auto& seq : batch().sequences) {
    const int64_t total = static_cast<int64_t>(seq.num_cached_tokens) + seq.num_new_tokens;
    for (const auto& table : seq.block_tables) {
      if (static_cast<int64_t>(table.size()) * block_size < total) {
        fail("forward batch: a sequence of {} tokens has only {} blocks of {}", total, table.size(), block_size);
      }
    }
  }
  checked_block_sizes_.push_back(block_size);
}

const AttentionPlan& CudaStepContext::attention_plan(bool with_prefill) const {
  auto& plan = plans_[with_prefill ? 1 : 0];
  if (!plan) plan = make_plan(with_prefill);
  return *plan;
}

void CudaStepContext::pack_plan(bool with_prefill, std::vector<int32_t>& packed, AttentionPlan& plan,
                                size_t offsets[6]) const {
  const ForwardBatch& b = batch();
  std::vector<std::pair<int32_t, int32_t>> tiles;  // (sequence, first row)
  std::vector<int32_t> decode_tokens;
  int64_t max_decode_keys = 0;
  int32_t first_token = 0;
  for (size_t s = 0; s < b.sequences.size(); ++s) {
    const SequenceChunk& seq = b.sequences[s];
    if (with_prefill && seq.num_new_tokens > kDecodeMaxNewTokens) {
      for (int32_t row = 0; row < seq.num_new_tokens; row += kernels::kPrefillTileRows) {
        tiles.emplace_back(static_cast<int32_t>(s), row);
      }
    } else {
      for (int32_t i = 0; i < seq.num_new_tokens; ++i) decode_tokens.push_back(first_token + i);
      max_decode_keys = std::max<int64_t>(max_decode_keys, int64_t{seq.num_cached_tokens} + seq.num_new_tokens);
    }
    first_token += seq.num_new_tokens;
  }
  // The item count depends on the number of decode tokens and, in powers of two, on their longest context.
  const int num_decode = static_cast<int>(decode_tokens.size());
  const kernels::DecodeAttentionPlan decode_plan =
      kernels::plan_decode_attention(num_decode, decode_layers_, num_sms_, max_decode_keys);
  const int splits = decode_plan.num_splits;
  std::vector<int32_t> item_token, item_chunk, token_item_begin;
  item_token.reserve(static_cast<size_t>(num_decode) * splits);
  item_chunk.reserve(static_cast<size_t>(num_decode) * splits);
  for (int t = 0; t < num_decode; ++t) {
    token_item_begin.push_back(t * splits);
    for (int split = 0; split < splits; ++split) {
      item_token.push_back(decode_tokens[t]);
      item_chunk.push_back(split);
    }
  }
  token_item_begin.push_back(num_decode * splits);
  // Tiles of later rows see more keys; starting them first shortens the tail of the launch.
  std::stable_sort(tiles.begin(), tiles.end(), [&](const auto& x, const auto& y) {
    return b.sequences[x.first].num_cached_tokens + x.second > b.sequences[y.first].num_cached_tokens + y.second;
  });
  std::vector<int32_t> tile_seq, tile_row;
  for (const auto& [s, row] : tiles) {
    tile_seq.push_back(s);
    tile_row.push_back(row);
  }
  offsets[0] = append(packed, tile_seq);
  offsets[1] = append(packed, tile_row);
  offsets[2] = append(packed, item_token);
  offsets[3] = append(packed, item_chunk);
  offsets[4] = append(packed, decode_tokens);
  offsets[5] = append(packed, token_item_begin);
  plan.num_tiles = static_cast<int>(tile_seq.size());
  plan.num_items = static_cast<int>(item_token.size());
  plan.num_splits = splits;
  plan.all_heads = decode_plan.all_heads;
  plan.whole_context = decode_plan.whole_context;
  plan.num_decode_tokens = num_decode;
}

AttentionPlan CudaStepContext::make_plan(bool with_prefill) const {
  std::vector<int32_t> packed;
  AttentionPlan plan;
  size_t offsets[6] = {};
  pack_plan(with_prefill, packed, plan, offsets);
  plan.data = allocator_.allocate(DType::I32, {static_cast<int64_t>(std::max<size_t>(packed.size(), 1))});
  staging_.upload(plan.data.data, packed.data(), packed.size() * sizeof(int32_t), stream_);
  const int32_t* base = plan.data.ptr<int32_t>();
  plan.tile_seq = base + offsets[0];
  plan.tile_row = base + offsets[1];
  plan.item_token = base + offsets[2];
  plan.item_chunk = base + offsets[3];
  plan.decode_tokens = base + offsets[4];
  plan.token_item_begin = base + offsets[5];
  return plan;
}

}  // namespace tern::cuda
