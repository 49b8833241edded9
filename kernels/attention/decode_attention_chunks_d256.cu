#include "attention/decode_attention_kernel.cuh"

namespace tern::kernels {
template void launch_decode_attention_chunks<256>(const DecodeAttentionParams&, cudaStream_t);
}  // namespace tern::kernels
