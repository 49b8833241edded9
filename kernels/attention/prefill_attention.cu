#include <stdexcept>
#include <string>

#include "attention/prefill_attention.h"

namespace tern::kernels {

bool prefill_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void launch_prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream) {
  const AttentionShape& s = params.shape;
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) {
    throw std::invalid_argument("prefill attention: " + std::to_string(s.num_heads) +
                                " heads are not a multiple of " + std::to_string(s.num_kv_heads) + " KV heads");
  }
  if (!prefill_attention_supports(s.head_dim)) {
    throw std::invalid_argument("prefill attention: head_dim " + std::to_string(s.head_dim) +
                                " is not built (64 or 128)");
  }
  if (params.num_tiles == 0) return;
  if (s.head_dim == 64) {
    launch_prefill_attention_wgmma<64>(params, stream);
  } else {
    launch_prefill_attention_wgmma<128>(params, stream);
  }
}

}  // namespace tern::kernels
