#include "attention/prefill_attention_kernel.cuh"

namespace tern::kernels {
template void launch_prefill_attention_tiles<64>(const PrefillAttentionParams&, cudaStream_t);
}  // namespace tern::kernels
