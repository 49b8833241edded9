#include "attention/prefill_attention_wgmma_kernel.cuh"

namespace tern::kernels {
template void launch_prefill_attention_wgmma<64>(const PrefillAttentionParams&, cudaStream_t);
}  // namespace tern::kernels
