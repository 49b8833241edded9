#pragma once
// Marks functions that run on the host and, under nvcc, on the device too, for the headers whose arithmetic the
// CPU tests check (attention/smem_swizzle.h, v4/v4_math.h).
#if defined(__CUDACC__)
#define TERN_HOST_DEVICE __host__ __device__
#else
#define TERN_HOST_DEVICE
#endif
