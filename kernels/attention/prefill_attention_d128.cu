#include "attention/prefill_attention_kernel.cuh"

namespace tern::kernels {
template void launch_prefill_attention_tiles<128>(const PrefillAttentionParams&, cudaStream_t);
}  // namespace tern::kernels
