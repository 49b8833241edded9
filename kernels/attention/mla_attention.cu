#include <stdexcept>
#include <string>

#include "attention/mla_attention.h"
#include "attention/merge_shares.h"

namespace tern::kernels {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("MLA attention: " + what);
}

}  // namespace

bool mla_attention_supports(int key_dim, int value_dim) {
  return key_dim > 0 && key_dim % 8 == 0 && key_dim <= kMlaMaxKeyDim && value_dim > 0 && value_dim % 8 == 0 &&
         value_dim <= key_dim;
}

void launch_mla_attention(const MlaAttentionParams& params, cudaStream_t stream) {
  check(mla_attention_supports(params.key_dim, params.value_dim),
        "key_dim " + std::to_string(params.key_dim) + " and value_dim " + std::to_string(params.value_dim) +
            " are not built (multiples of 8, value_dim <= key_dim <= " + std::to_string(kMlaMaxKeyDim) + ")");
  check(params.num_heads > 0, "num_heads " + std::to_string(params.num_heads) + " is not positive");
  check(params.kv.block_size > 0, "block size " + std::to_string(params.kv.block_size) + " is not positive");
  check(params.num_splits >= 1 && params.num_splits <= kDecodeMaxSplits,
        "num_splits " + std::to_string(params.num_splits) + " is outside [1, " + std::to_string(kDecodeMaxSplits) +
            "]");
  check(params.num_items == 0 || (params.partial_out && params.partial_lse), "decode items need the workspace");
  const auto launch_tiles = [&](bool split) {
    if (params.value_dim <= 128) {
      launch_mla_attention_tiles<128>(params, split, stream);
    } else if (params.value_dim <= 512) {
      launch_mla_attention_tiles<512>(params, split, stream);
    } else {
      launch_mla_attention_tiles<576>(params, split, stream);
    }
  };
  if (params.num_tiles > 0) launch_tiles(false);
  if (params.num_items == 0) return;
  launch_tiles(true);
  MergeSharesParams merge;
  merge.partial_out = params.partial_out;
  merge.partial_lse = params.partial_lse;
  merge.out = params.out;
  merge.out_f32 = params.out_f32;
  merge.out_lse = params.out_lse;
  merge.tokens = params.tokens;
  merge.token_item_begin = params.token_item_begin;
  merge.num_decode_tokens = params.num_decode_tokens;
  merge.num_heads = params.num_heads;
  merge.value_dim = params.value_dim;
  launch_merge_shares(merge, stream);
}

}  // namespace tern::kernels
