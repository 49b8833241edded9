#include "attention/mla_attention_kernel.cuh"

namespace tern::kernels {
template void launch_mla_attention_tiles<512>(const MlaAttentionParams&, bool, cudaStream_t);
}  // namespace tern::kernels
