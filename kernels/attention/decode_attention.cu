#include <stdexcept>
#include <string>

#include "attention/decode_attention.h"
#include "attention/merge_shares.h"

namespace tern::kernels {

namespace {

constexpr int kMaxHeadDim = 512;
// The tensor-core kernels pad a GQA group's query heads to the 16 rows of one mma.
constexpr int kTensorCoreMaxGroup = 16;

// The head sizes launch_per_kv_head (and the all-heads kernel) run on tensor cores.
bool on_tensor_cores(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

void launch_per_kv_head(const DecodeAttentionParams& params, cudaStream_t stream) {
  const int head_dim = params.shape.head_dim;
  const int group = params.shape.num_heads / params.shape.num_kv_heads;
  if (on_tensor_cores(head_dim) && group <= kTensorCoreMaxGroup) {
    if (head_dim == 64) {
      launch_decode_attention_mma<64>(params, stream);
    } else {
      launch_decode_attention_mma<128>(params, stream);
    }
  } else if (head_dim <= 16) {
    launch_decode_attention_chunks<16>(params, stream);
  } else if (head_dim <= 32) {
    launch_decode_attention_chunks<32>(params, stream);
  } else if (head_dim <= 64) {
    launch_decode_attention_chunks<64>(params, stream);
  } else if (head_dim <= 128) {
    launch_decode_attention_chunks<128>(params, stream);
  } else if (head_dim <= 256) {
    launch_decode_attention_chunks<256>(params, stream);
  } else {
    launch_decode_attention_chunks<kMaxHeadDim>(params, stream);
  }
}

}  // namespace

bool decode_attention_all_heads_supports(int head_dim, int num_kv_heads) {
  return on_tensor_cores(head_dim) && num_kv_heads >= 1 && num_kv_heads <= kDecodeAllHeadsMaxKvHeads;
}

bool decode_attention_whole_context_supports(int64_t head_dim, int64_t value_dim, int64_t block_size) {
  return on_tensor_cores(head_dim) && value_dim == head_dim && block_size > 0 && block_size % kDecodePageKeys == 0;
}

bool decode_attention_supports(int head_dim, int group_size) {
  return head_dim > 0 && head_dim % 8 == 0 && head_dim <= kMaxHeadDim && group_size >= 1;
}

void launch_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream) {
  const AttentionShape& s = params.shape;
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) {
    throw std::invalid_argument("decode attention: " + std::to_string(s.num_heads) + " heads are not a multiple of " +
                                std::to_string(s.num_kv_heads) + " KV heads");
  }
  if (!decode_attention_supports(s.head_dim, s.num_heads / s.num_kv_heads)) {
    throw std::invalid_argument("decode attention: head_dim " + std::to_string(s.head_dim) + " with " +
                                std::to_string(s.num_heads / s.num_kv_heads) +
                                " query heads per KV head is not built (head_dim a multiple of 8 up to " + std::to_string(kMaxHeadDim) + ")");
  }
  if (params.num_splits < 1 || params.num_splits > kDecodeMaxSplits) {
    throw std::invalid_argument("decode attention: num_splits " + std::to_string(params.num_splits) +
                                " is outside [1, " + std::to_string(kDecodeMaxSplits) + "]");
  }
  if (params.num_items == 0) return;
  const bool all_heads = params.all_heads && !params.kv.fp8() &&
                         decode_attention_all_heads_supports(s.head_dim, s.num_kv_heads) &&
                         s.num_heads / s.num_kv_heads <= kTensorCoreMaxGroup;
  if (all_heads && s.head_dim == 64) {
    launch_decode_attention_all_heads<64>(params, stream);
  } else if (all_heads) {
    launch_decode_attention_all_heads<128>(params, stream);
  } else {
    launch_per_kv_head(params, stream);
  }
  if (params.shares_are_outputs()) return;
  MergeSharesParams merge;
  merge.partial_out = params.partial_out;
  merge.partial_lse = params.partial_lse;
  merge.sinks = s.sinks;
  merge.out = params.out;
  merge.out_f32 = params.out_f32;
  merge.out_lse = params.out_lse;
  merge.tokens = params.tokens;
  merge.token_item_begin = params.token_item_begin;
  merge.num_decode_tokens = params.num_decode_tokens;
  merge.num_heads = s.num_heads;
  merge.value_dim = s.head_dim;
  launch_merge_shares(merge, stream);
}

}  // namespace tern::kernels
