#pragma once
// The seam between model code and hardware. Model code is written once against this interface; the CPU backend
// is the reference every other backend is checked against. Ops return new tensors in the backend's memory and
// the backend's activation dtype (float32 on the CPU).
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/expert_routing.h"
#include "backend/forward_batch.h"
#include "backend/kv_cache.h"
#include "backend/tensor.h"
#include "core/tensor_info.h"

namespace tern {

// A ForwardBatch in the backend's memory, made once per step and read by every layer.
class StepContext {
 public:
  explicit StepContext(const ForwardBatch& batch) : batch_(batch) {}
  virtual ~StepContext() = default;
  const ForwardBatch& batch() const { return batch_; }

 private:
  const ForwardBatch& batch_;
};

struct RopeTable {
  Tensor inv_freq;  // [rotary_dim / 2] float32
  int64_t rotary_dim = 0;
  float attention_scaling = 1.0f;
  // Pairs rotated together: (i, i + rotary_dim / 2) (rotate-half, Llama) or (2i, 2i + 1) (interleaved, DeepSeek).
  bool interleaved = false;
  // Which dims of a head rotate: the first rotary_dim (most models) or the last rotary_dim (DeepSeek-V4).
  bool rotate_last_dims = false;
};

struct AttentionParams {
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: full attention; else a query attends to the last `sliding_window` positions
  const Tensor* sinks = nullptr;  // [num_heads] float32 logits of a per-head sink that takes softmax mass
  // > 0 for layers that cache keys only (value_dim 0): a key's first `values_from_keys` dims are its value (MLA's
  // latent, DeepSeek-V4's shared K=V).
  int64_t values_from_keys = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory
  // Loads checkpoint tensors, concatenated along dimension 0 (e.g. fused q/k/v), keeping bf16/f32 weights as
  // they are (f16 becomes f32).
  virtual Tensor load_weight(std::span<const TensorInfo* const> parts) = 0;
  virtual Tensor from_host_f32(std::span<const float> values, std::vector<int64_t> shape) = 0;
  virtual std::vector<float> to_host_f32(const Tensor& tensor) = 0;
  virtual std::vector<int32_t> to_host_i32(const Tensor& tensor) = 0;
  virtual KvCache allocate_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks,
                                    int64_t block_size) = 0;
  virtual std::unique_ptr<StepContext> begin_step(const ForwardBatch& batch) = 0;

  // Ops. Shapes: T tokens of the step, H hidden size, heads x dims for attention tensors.
  // The ops of MoE, MLA and DeepSeek-V4 models (concat_columns .. moe_experts, rope_at) have defaults that fail
  // naming the backend and op, so a backend without them still serves the dense models.
  virtual Tensor embedding(const Tensor& table, const StepContext& step) = 0;        // -> [T, H]
  virtual Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) = 0;     // over the last dim
  // residual += x, then returns rms_norm(residual).
  virtual Tensor add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps) = 0;
  // x [T, K] times weight [N, K] transposed, plus bias [N] -> [T, N]
  virtual Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias) = 0;
  virtual void add_in_place(Tensor& x, const Tensor& y) = 0;
  // Columns [begin, begin + count) of x [T, N] as a new [T, count] tensor.
  virtual Tensor slice_columns(const Tensor& x, int64_t begin, int64_t count) = 0;
  // [R, A] and [R, B] (trailing dims flattened) side by side -> [R, A + B].
  virtual Tensor concat_columns(const Tensor& a, const Tensor& b);
  virtual Tensor silu_mul(const Tensor& gate_up) = 0;  // [T, 2I]: silu(first half) * second half -> [T, I]
  // [T, 2I] (gate half, up half) -> [T, I] with the given activation (clamped SwiGLU, gpt-oss's GLU).
  virtual Tensor gated_activation(const Tensor& gate_up, const GluActivation& activation);
  // Per-group linear: x [T, G, K] times weight [G, N, K] transposed -> [T, G, N] (MLA's absorbed per-head
  // projections, DeepSeek-V4's grouped output projection).
  virtual Tensor grouped_linear(const Tensor& x, const Tensor& weight);
  // Picks top_k experts per token from router logits [T, E].
  virtual ExpertRouting route_experts(const Tensor& logits, const RouterParams& params, const StepContext& step);
  // Sum over each token's routed experts of weight * down(activation(gate_up(x))): x [T, H] -> [T, H].
  virtual Tensor moe_experts(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts,
                             const GluActivation& activation);
  // Rotates the first rotary_dim dims of each head of x [T, heads, head_dim] in place (rotate-half layout).
  virtual void rope(Tensor& x, const RopeTable& table, const StepContext& step) = 0;
  // The same rotation at explicit positions ([T] host values); `inverse` rotates by the negative angle.
  virtual void rope_at(Tensor& x, const RopeTable& table, std::span<const int32_t> positions, bool inverse);
  // Writes this step's keys/values [T, kv_heads, dim] into the cache slots of layer `layer`.
  virtual void store_kv(KvCache& cache, int layer, const Tensor& key, const Tensor& value,
                        const StepContext& step) = 0;
  // rope(query); rope(key); store_kv(key, value) in one op, so a backend can fuse the rotation into the cache
  // write. Afterwards `key` may or may not be rotated: read the cache, not `key`.
  virtual void rope_store_kv(Tensor& query, Tensor& key, const Tensor& value, const RopeTable& table, KvCache& cache,
                             int layer, const StepContext& step) {
    rope(query, table, step);
    rope(key, table, step);
    store_kv(cache, layer, key, value, step);
  }
  // Causal attention of q [T, heads, key_dim] over each sequence's cached and new tokens -> [T, heads, value_dim].
  virtual Tensor attention(const Tensor& query, const KvCache& cache, int layer, const AttentionParams& params,
                           const StepContext& step) = 0;
  virtual Tensor gather_logit_rows(const Tensor& x, const StepContext& step) = 0;  // [T, H] -> [R, H]
  virtual Tensor argmax(const Tensor& logits) = 0;                                  // [R, V] -> [R] int32
};

std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);
// The Hopper backend (bf16 activations, float32 accumulation); defined only in builds with TERN_CUDA.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// "cpu" or "cuda"; fails clearly for an unknown name or for "cuda" in a build without CUDA.
std::unique_ptr<Backend> make_backend(const std::string& name, int num_threads = 0);

}  // namespace tern
