#include "attention/decode_attention_mma_kernel.cuh"

namespace tern::kernels {
template void launch_decode_attention_mma<128>(const DecodeAttentionParams&, cudaStream_t);
template void launch_decode_attention_all_heads<128>(const DecodeAttentionParams&, cudaStream_t);
}  // namespace tern::kernels
