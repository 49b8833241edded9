#pragma once
// What the CUDA benchmarks share: fail-fast status checks, deterministic random bf16 and e4m3 data made on the
// device, and the median of CUDA-event-timed runs after a warm-up.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tern::bench {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// A value in [-1, 1) from a hash of the index: the same data on every run, no host generation of gigabytes.
__device__ inline float hashed_value(size_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  return (h & 0xffff) / 32768.0f - 1.0f;
}

__global__ inline void fill_random(__nv_bfloat16* out, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16(hashed_value(i, seed));
  }
}

__global__ inline void fill_random_e4m3(__nv_fp8_e4m3* out, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __nv_fp8_e4m3(hashed_value(i, seed));
  }
}

template <typename T>
__global__ void fill_value(T* out, size_t count, T value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

template <typename T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
  return p;
}

inline __nv_bfloat16* random_bf16(size_t count, uint32_t seed) {
  auto* p = device_alloc<__nv_bfloat16>(count);
  fill_random<<<1024, 256>>>(p, count, seed);
  check(cudaGetLastError(), "fill_random");
  return p;
}

// Median milliseconds of `reps` timed calls of fn (work queued on `stream`) after `warmup` untimed ones.
template <typename Fn>
double median_ms(Fn&& fn, int warmup, int reps, cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start, stream);
    fn();
    cudaEventRecord(stop, stream);
    check(cudaEventSynchronize(stop), "timed run");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  check(cudaGetLastError(), "timed launches");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median milliseconds of one call of fn(i), from `reps` timed replays of a graph holding `calls` calls back to back
// (call i may pick among rotating inputs). Recorded steps run the kernels this way: the host's launch latency, which
// an event pair around a single launch also times, stays out, and the calls follow each other as programmatic
// dependents where they are launched as such.
template <typename Fn>
double graph_median_ms(Fn&& fn, int calls, int warmup, int reps, cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < calls; ++i) fn(i);
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const double ms = median_ms([&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); }, warmup, reps, stream);
  check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  return ms / calls;
}

// The copy anchor: device-to-device bandwidth over 2 GiB, counting bytes read and written.
inline double copy_bandwidth_tbs() {
  const size_t bytes = size_t{2} << 30;
  char* src = device_alloc<char>(bytes);
  char* dst = device_alloc<char>(bytes);
  check(cudaMemset(src, 1, bytes), "memset");
  const double ms = median_ms([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); }, 3, 20);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * bytes / (ms * 1e-3) / 1e12;
}

// What every benchmark prints first: the device and the copy anchor measured in the same run (returned, TB/s).
inline double print_device_and_copy_anchor() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs, %.0f MB L2, compute %d.%d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6, prop.major, prop.minor);
  const double copy_tbs = copy_bandwidth_tbs();
  std::printf("baseline: device-to-device copy %.2f TB/s (bytes read + written)\n", copy_tbs);
  return copy_tbs;
}

}  // namespace tern::bench
