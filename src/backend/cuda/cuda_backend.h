#pragma once
// The CUDA backend for Hopper (make_cuda_backend in backend/backend.h): bf16 weights, activations and KV cache,
// float32 accumulation; cuBLASLt GEMMs and the kernels under kernels/.
namespace tern {

// True when the CUDA runtime sees at least one device (GPU tests skip otherwise).
bool cuda_device_available();

}  // namespace tern
