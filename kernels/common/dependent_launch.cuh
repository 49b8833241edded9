#pragma once
// Programmatic dependent launch (sm_90): a kernel launched with launch_dependent may start while the kernel before
// it in the stream still runs, and waits (wait_for_prior_grids) only where it first needs that kernel's results.
// Batch-1 decode is a chain of ~330 dependent kernels of a few microseconds each, so the launch and ramp-up of
// each one, hidden behind its predecessor, is a large part of a step. Rules for a kernel launched this way:
// nothing before wait_for_prior_grids may read memory an earlier kernel writes, or write memory an earlier kernel
// reads (weights and other constants are fine). Every kernel calls allow_dependent_grids after its own wait, so a
// kernel starts only once everything before its predecessor is done: before its wait it may also read what was
// copied from the host before the step (the step's metadata: positions, block tables, split plans) and the KV
// cache rows of earlier steps. Both calls are no-ops in a kernel launched the usual way.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tern::kernels {

// Blocks until every earlier kernel of the stream has finished and its writes are visible.
__device__ __forceinline__ void wait_for_prior_grids() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Lets the next kernel, if launched with launch_dependent, start its blocks (it still waits for this one's
// results). Called early: the next kernel can only start once every block of this one has called it or exited.
__device__ __forceinline__ void allow_dependent_grids() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }

template <typename... Params, typename... Args>
void launch_dependent(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute overlap;
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &overlap;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace tern::kernels
