#pragma once
// Greedy sampling on the device: the index of the largest logit of each row (the first one on ties), so only
// token ids travel back to the host.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// Where a row has several blocks (up to kArgmaxSplitRows rows of a large vocabulary), each block's best goes to a
// slot of the workspace and the row's last block to finish picks among them, counted on the row's ticket. The
// tickets start at zero (ArgmaxWorkspace::bytes of zeros) and the last block puts its row's back, so one
// workspace serves every launch on one stream.
constexpr int kArgmaxSplitRows = 16;
constexpr int kArgmaxMaxSplits = 64;
struct ArgmaxWorkspace {
  void* data = nullptr;  // ArgmaxWorkspace::bytes, zeroed once
  static constexpr size_t bytes = kArgmaxSplitRows * (kArgmaxMaxSplits * (sizeof(float) + sizeof(int32_t)) + 4);
};

void launch_argmax_bf16(const __nv_bfloat16* logits, int32_t* out, int num_rows, int vocab,
                        const ArgmaxWorkspace& workspace, cudaStream_t stream);
void launch_argmax_f32(const float* logits, int32_t* out, int num_rows, int vocab, const ArgmaxWorkspace& workspace,
                       cudaStream_t stream);

}  // namespace tern::kernels
