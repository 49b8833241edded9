#pragma once
// The seam between model code and hardware. Model code is written once against this interface; the CPU backend
// is the reference every other backend is checked against. Ops return new tensors in the backend's memory and
// the backend's activation dtype (float32 on the CPU).
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/compressed_kv.h"
#include "backend/expert_routing.h"
#include "backend/forward_batch.h"
#include "backend/kv_block_transfer.h"
#include "backend/kv_cache.h"
#include "backend/shared_buffer.h"
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

// A block's input before its pre-norm: rms_norm(residual + addend) * norm_weight, for the ops that run the norm
// together with the projection after it. The residual becomes residual + addend (possibly a new tensor) when an
// addend is given.
struct PreNorm {
  Tensor& residual;
  const Tensor* addend = nullptr;
  const Tensor& norm_weight;
  float eps = 1e-6f;
};

// A per-head RMSNorm of queries and keys between their projection and RoPE (Qwen3's q_norm and k_norm, DeepSeek-V4's
// unweighted query norm and kv_norm): weights [head_dim], both or neither.
struct HeadNormWeights {
  const Tensor* query = nullptr;
  const Tensor* key = nullptr;
  float eps = 1e-6f;
};

// How a fused q/k/v projection's output columns divide into heads: q, then k, then v; and their norms, if any.
struct QkvHeads {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  HeadNormWeights norms;
};

// Those columns as [T, heads, head_dim] tensors (Backend::split_qkv).
struct QkvColumns {
  Tensor q, k, v;
};

// Attention over one rank's share of the cached tokens (decode context parallelism, Backend::partial_attention).
struct AttentionPartial {
  Tensor out;  // [T, heads, value_dim] float32: softmax-weighted values over the rank's tokens; zero where it has none
  Tensor lse;  // [T, heads] float32: natural log of sum over the rank's tokens of exp(score); -inf where it has none
};

struct AttentionParams {
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: full attention; else a query attends to the last `sliding_window` positions
  const Tensor* sinks = nullptr;  // [num_heads] float32 logits of a per-head sink that takes softmax mass
  // > 0 for layers that cache keys only (value_dim 0): a key's first `values_from_keys` dims are its value (MLA's
  // latent, DeepSeek-V4's shared K=V).
  int64_t values_from_keys = 0;
};

// The rows of the vocabulary an embedding table holds: all of it, or one rank's shard under tensor parallelism
// (vocab-parallel embedding).
struct VocabShard {
  int64_t first_id = 0;
  int64_t vocab_size = 0;  // every valid token id is below it; 0: the table's rows
};

struct DeviceMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// One row's random sampling on the device (Backend::sample).
struct RowSampling {
  float temperature = 1.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: all
  float top_p = 1.0f;        // >= 1: all
  float uniform = 0.0f;      // the row's random draw in [0, 1), made by the sequence's own generator
  // A draft to verify (speculative decoding's point-mass drafts, engine/rejection_sampler.h), or -1: kept where
  // draft_uniform < p(draft) under the row's filtered distribution; else the row draws, with `uniform`, from that
  // distribution without the draft (the residual). A greedy row ignores it (its argmax decides).
  int32_t draft_id = -1;
  float draft_uniform = 0.0f;
};

// What a recorded step gives back, in the backend's memory: the sampled ids [R] int32 and, for a caller that reads
// them (a speculative proposer drafting from a model's hidden states), the step's hidden states.
struct StepOutputs {
  Tensor ids;
  Tensor hidden_states;
};
// One step's work as a recorded graph would run it.
using StepForward = std::function<StepOutputs(const StepContext&)>;

// Sampled ids on their way to the host (Backend::to_host_i32_async). Destroying one waits for the copy.
class PendingIds {
 public:
  virtual ~PendingIds() = default;
  // Blocks until the ids are on the host; call once.
  virtual std::vector<int32_t> wait() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // What `tern` prints at start: the name with the device or thread count ("cuda (NVIDIA H200, sm_90a)").
  virtual std::string description() const { return name(); }
  // The dtype of the activations the ops return (float32 on the CPU, bf16 on CUDA).
  virtual DType activation_dtype() const = 0;

  // Memory
  // Loads checkpoint tensors, concatenated along dimension 0 (e.g. fused q/k/v), keeping bf16/f32 weights as
  // they are (f16 becomes f32).
  virtual Tensor load_weight(std::span<const TensorInfo* const> parts) = 0;
  // The same for the weight of `linear` and the norm_linear ops, [N, K]: a backend with kernels for a quantized
  // format may keep such a weight in it (the CUDA backend keeps block FP8 as codes with block_scales).
  virtual Tensor load_linear_weight(std::span<const TensorInfo* const> parts) { return load_weight(parts); }
  // The same for MoE experts' weights: `parts` are `num_experts` runs of consecutive parts, each an expert's [N, K]
  // (gate then up, say), concatenated (the caller reshapes them to [E, N, K] for moe_experts). Each expert's
  // quantization blocks are its own (a block-FP8 expert of 2,880 rows ends on a partial block).
  virtual Tensor load_expert_weight(std::span<const TensorInfo* const> parts, int64_t num_experts) {
    (void)num_experts;
    return load_linear_weight(parts);
  }
  virtual Tensor from_host_f32(std::span<const float> values, std::vector<int64_t> shape) = 0;
  // Host int32 values (routing tables, counters) as a backend tensor of `shape`.
  Tensor from_host_i32(std::span<const int32_t> values, std::vector<int64_t> shape);
  virtual std::vector<float> to_host_f32(const Tensor& tensor) = 0;
  virtual std::vector<int32_t> to_host_i32(const Tensor& tensor) = 0;
  // Starts copying an int32 tensor to the host behind the work launched so far, without waiting for it (the
  // overlap scheduler reads a step's sampled ids after launching the next step). The default copies at once.
  virtual std::unique_ptr<PendingIds> to_host_i32_async(const Tensor& tensor);
  // A paged cache of `num_blocks` blocks for `layers`, its keys and values stored as `dtype` (a backend without
  // kernels for it throws tern::Error saying so).
  virtual KvCache allocate_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                                    KvCacheDtype dtype) = 0;
  KvCache allocate_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size) {
    return allocate_kv_cache(layers, num_blocks, block_size, KvCacheDtype::automatic);
  }
  // Makes the batch's metadata in the backend's memory, filling in its deferred tokens there (ForwardBatch).
  virtual std::unique_ptr<StepContext> begin_step(const ForwardBatch& batch) = 0;
  // Whole KV blocks of every layer as self-describing host bytes (format in kv_block_transfer.h), and back: how a
  // prompt's KV moves between engines (prefill/decode disaggregation). An import whose header does not match
  // `cache` (layers, block size, bytes per block) throws tern::Error naming the difference.
  std::vector<uint8_t> export_kv_blocks(const KvCache& cache, std::span<const int32_t> blocks);
  void import_kv_blocks(KvCache& cache, std::span<const int32_t> blocks, std::span<const uint8_t> bytes);
  // The payload alone (kv_payload_bytes), to or from host memory or the memory of a shared buffer this backend
  // created or opened; done when the call returns.
  virtual void export_kv_blocks_to(const KvCache& cache, std::span<const int32_t> blocks, void* payload) = 0;
  virtual void import_kv_blocks_from(KvCache& cache, std::span<const int32_t> blocks,
                                     const KvPayloadView& payload) = 0;
  // The host tier's twin of a cache (the KV cache manager's host pool): the same layers and element types in the
  // host memory this backend copies to and from fastest (pinned on CUDA).
  virtual KvCache allocate_host_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks,
                                         int64_t block_size, KvCacheDtype dtype) = 0;
  // Copies whole blocks between a cache and its host twin (copy_kv_cache_blocks), ordered after the work launched
  // so far and before any later op's use of the blocks. The host may read or write the twin's memory only after
  // wait_kv_copies.
  virtual void copy_kv_blocks(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to,
                              std::span<const int32_t> to_blocks) = 0;
  virtual void wait_kv_copies() {}
  // Seconds the finished copy_kv_blocks calls took (device time where the backend can tell it).
  virtual double kv_copy_seconds() { return 0.0; }
  // Memory another process of this host maps too (same-host KV transfer; see shared_buffer.h). Throws tern::Error
  // when it cannot be made, or when `handle` is not one this backend can open.
  virtual std::unique_ptr<SharedBuffer> create_shared_buffer(size_t bytes) = 0;
  virtual std::unique_ptr<SharedBuffer> open_shared_buffer(std::span<const uint8_t> handle) = 0;

  // Free and total device memory, for sizing the KV cache; nullopt for backends in host memory.
  virtual std::optional<DeviceMemory> device_memory() { return std::nullopt; }
  // True where the KV cache lives in host memory, so that a fractional KV budget is a share of the memory the host
  // has available.
  virtual bool kv_cache_in_host_memory() const { return false; }
  // Runs a step of decode chunks (each at most max_recorded_chunk_tokens() new tokens) through a recorded graph
  // (CUDA graphs) and returns its outputs in the backend's memory, valid until the next step of the same shape runs
  // (read them, or copy them elsewhere, before): the first step of each shape (tokens, sequences, logit rows) runs
  // `forward` eagerly and records it; later steps of that shape replay the recording with their own metadata
  // (deferred tokens filled in first), however their tokens and logit rows fall among the sequences. `forward` must
  // launch work only (no reads back to the host) and do the same work for every step of a shape; the tensors it
  // reads besides the step's metadata, the model and the cache are read where the recording found them.
  // Recordings are kept per `recorder` (a model runner's id): two runners on one backend, a target and its draft
  // model, never replay each other's, which read their own model and KV cache. nullopt where the backend does not
  // record steps, which then run eagerly (the CPU backend; the CUDA backend under data parallelism, whose MoE token
  // exchange reads the host).
  virtual std::optional<StepOutputs> run_recorded_step(const ForwardBatch& batch, const StepForward& forward,
                                                       uint64_t recorder = 0) {
    (void)batch;
    (void)forward;
    (void)recorder;
    return std::nullopt;
  }
  // The most new tokens a sequence of a recorded step may have (run_recorded_step).
  virtual int32_t max_recorded_chunk_tokens() const { return 1; }
  // Drops the recorded steps of `recorder`, or of all recorders, so that the next step of each shape records anew:
  // for when tensors the recordings read were replaced or freed (a runner's KV cache; EPLB's placements load new
  // expert weights and replica tables).
  virtual void discard_recorded_steps(std::optional<uint64_t> recorder = std::nullopt) { (void)recorder; }

  // Ops. Shapes: T tokens of the step, H hidden size, heads x dims for attention tensors.
  // The ops of MoE, MLA and DeepSeek-V4 models (concat_columns .. moe_experts, rope_at, hyper_mix ..
  // compressed_attention) have defaults that fail naming the backend and op, so a backend without them still
  // serves the dense models.
  // -> [T, H]: each token's row of `table`, which holds ids [shard.first_id, shard.first_id + rows); a token of
  // another shard gets a zero row (the tensor-parallel all-reduce adds its own). Ids outside the vocabulary fail.
  virtual Tensor embedding(const Tensor& table, const StepContext& step, const VocabShard& shard) = 0;
  virtual Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) = 0;     // over the last dim
  // residual += x, then returns rms_norm(residual).
  virtual Tensor add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps) = 0;
  // x [T, K] times weight [N, K] transposed, plus bias [N] -> [T, N]
  virtual Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias) = 0;
  // A block's first ops, each as one op so that a backend can run it as one kernel (the CUDA batch-1 GEMV normalizes
  // its input as it loads it, and runs SiLU-and-mul or RoPE and the cache write in its epilogue). The defaults run
  // the ops one after another:
  // linear of the normalized input;
  virtual Tensor norm_linear(PreNorm& input, const Tensor& weight, const Tensor* bias);
  // silu_mul of that, for a [gate; up] weight;
  virtual Tensor norm_linear_silu_mul(PreNorm& input, const Tensor& gate_up_weight);
  // rope_store_qkv of that, for a [q; k; v] weight: the rotated queries.
  virtual Tensor norm_linear_rope_store_kv(PreNorm& input, const Tensor& qkv_weight, const Tensor* qkv_bias,
                                           const QkvHeads& heads, const RopeTable& table, KvCache& cache, int layer,
                                           const StepContext& step);
  // The same with float32 outputs where the backend's activations are narrower (router logits: choosing experts
  // by rounded logits flips near-ties).
  virtual Tensor linear_f32(const Tensor& x, const Tensor& weight, const Tensor* bias) { return linear(x, weight, bias); }
  // linear_f32 of rms_norm(x, norm_weight, eps), as one op so that a backend can run it as one kernel (CUDA's GEMV of
  // few long rows sums the squares of x as it reads x and scales each dot product once; DeepSeek-V4's mHC mixes).
  virtual Tensor rms_norm_linear_f32(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& weight);
  virtual void add_in_place(Tensor& x, const Tensor& y) = 0;
  // A new tensor with x's values, which an op may write into without changing x.
  virtual Tensor copy(const Tensor& x) = 0;
  // Columns [begin, begin + count) of x [T, N] as a [T, count] tensor, which may share x's storage (on CUDA a
  // one-row slice is a view): writing to it may change x.
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
  // The inverse rotation at the step's positions (DeepSeek-V4 rotates its attention output back). The default
  // passes the positions through rope_at; a backend that records steps reads them from its step context instead.
  virtual void rope_inverse(Tensor& x, const RopeTable& table, const StepContext& step);
  // Writes this step's keys/values [T, kv_heads, dim] into the cache slots of layer `layer`.
  virtual void store_kv(KvCache& cache, int layer, const Tensor& key, const Tensor& value,
                        const StepContext& step) = 0;
  // rope(query); rope(key); store_kv(key, value) in one op, so a backend can fuse the rotation into the cache
  // write, with query and key normalized per head first where `norms` has weights. Afterwards `key` may or may not
  // be rotated or normalized: read the cache, not `key`.
  virtual void rope_store_kv(Tensor& query, Tensor& key, const Tensor& value, const HeadNormWeights& norms,
                             const RopeTable& table, KvCache& cache, int layer, const StepContext& step);
  // A fused projection's output qkv [T, (heads + 2 kv_heads) head_dim] cut into q, k and v (slice_columns: views of
  // qkv where the backend makes them).
  QkvColumns split_qkv(const Tensor& qkv, const QkvHeads& heads);
  // rope_store_kv of split_qkv(qkv), q and k normalized first where heads has norms -> the rotated queries
  // [T, heads, head_dim]. The CUDA backend reads q, k and v where they lie in qkv's rows instead of copying the
  // columns out first, and normalizes the heads in the same kernel.
  virtual Tensor rope_store_qkv(const Tensor& qkv, const QkvHeads& heads, const RopeTable& table, KvCache& cache,
                                int layer, const StepContext& step);
  // Causal attention of q [T, heads, key_dim] over each sequence's cached and new tokens -> [T, heads, value_dim].
  virtual Tensor attention(const Tensor& query, const KvCache& cache, int layer, const AttentionParams& params,
                           const StepContext& step) = 0;
  // Decode context parallelism (a cache whose context_shard has size > 1, kv_context_shard.h): the attention of
  // every query head over the tokens this rank caches, causal by global position, as an output and its log-sum-exp.
  // Sinks are refused (their softmax mass belongs to no rank's tokens); sliding windows apply by global position.
  virtual AttentionPartial partial_attention(const Tensor& query, const KvCache& cache, int layer,
                                             const AttentionParams& params, const StepContext& step);
  // The exact attention from the ranks' partials, gathered: outs [T, heads, ranks, value_dim] and lses
  // [T, heads, ranks] -> [T, heads, value_dim], each rank's output weighted by exp(lse - max lse) and normalized.
  virtual Tensor merge_attention_partials(const Tensor& outs, const Tensor& lses);
  // DeepSeek-V4 (shapes and cache layout in compressed_kv.h).
  // mHC weights from mixes [T, M] (the streams' normalized projection), base [M] and scale: M = N gives the
  // final head's collapse weights [T, N] (sigmoid + eps); M = (2 + N) * N gives [T, M]: collapse weights, expand
  // weights (2 * sigmoid) and the N x N stream mix made doubly stochastic by Sinkhorn-Knopp.
  virtual Tensor hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale, const HyperMixParams& params);
  // streams [T, N, H], mix [T, >= N] -> sum_i mix[:, i] * streams[:, i] [T, H].
  virtual Tensor hyper_collapse(const Tensor& streams, const Tensor& mix);
  // -> [T, N, H]: stream k = post[k] * block_out + sum_j comb[j][k] * streams[j].
  virtual Tensor hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix);
  // hyper_mix of the mixes, then hyper_collapse of the streams by its weights, as one op for a backend that runs
  // them as one kernel (the collapse weights need none of Sinkhorn's rounds).
  virtual HyperMixed hyper_mix_collapse(const Tensor& streams, const Tensor& mixes, const Tensor& base,
                                        const Tensor& scale, const HyperMixParams& params);
  // Writes this step's compressor projections kv, gate [T, width] into layer `layer`'s state rows and the
  // compressed entry of every window a new token closes.
  virtual void compress_kv(KvCache& cache, int layer, const Tensor& kv, const Tensor& gate,
                           const CompressorParams& params, const StepContext& step);
  // Lightning Indexer top-k: query [T, heads, dim] (rotated), head_weights [T, heads] -> [T, top_k] int32.
  virtual Tensor select_compressed(const Tensor& query, const Tensor& head_weights, const KvCache& cache, int layer,
                                   const IndexerParams& params, const StepContext& step);
  // query [T, heads, head_dim] -> [T, heads, head_dim].
  virtual Tensor compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                                      const CompressedAttentionParams& params, const StepContext& step);
  // The group of backends, one per device (or thread), that this one computes with: its rank and size. Ranks run
  // the same model and meet at the collectives below, which every rank calls in the same order.
  virtual int group_rank() const { return 0; }
  virtual int group_size() const { return 1; }
  // Tensor parallelism: the whole group shards the model's weights and all-reduces the sharded layers' outputs;
  // under data parallelism nothing is tensor-parallel (a group of one for the weight loader and the all-reduces).
  int tensor_parallel_rank() const { return data_parallel_ ? 0 : group_rank(); }
  int tensor_parallel_size() const { return data_parallel_ ? 1 : group_size(); }
  // Data-parallel attention (docs/parallelism.md): each rank runs whole attention, embedding, dense MLPs and
  // lm_head for its own sequences, and the MoE layers exchange tokens with all_to_all_rows (expert parallelism is
  // required). Set by whoever forms the group, before the model loads.
  bool data_parallel() const { return data_parallel_ && group_size() > 1; }
  void set_data_parallel(bool on) { data_parallel_ = on; }
  // Expert parallelism: the MoE layers of this group's model keep only their rank's share of the experts, instead
  // of every expert on every rank; each layer has its E experts plus `num_redundant_experts` physical slots for
  // replicas of busy ones (EPLB). Outputs are summed over the ranks (all-reduce) or, under data parallelism, sent
  // back to the tokens' ranks. Set by whoever forms the group, before the model loads.
  bool expert_parallel() const { return expert_parallel_ && group_size() > 1; }
  int64_t num_redundant_experts() const { return expert_parallel() ? num_redundant_experts_ : 0; }
  void set_expert_parallel(bool on, int64_t num_redundant_experts = 0) {
    expert_parallel_ = on;
    num_redundant_experts_ = num_redundant_experts;
  }
  // Decode context parallelism: the KV caches this backend allocates hold only its rank's tokens of every sequence
  // (every tensor_parallel_size()-th, KvContextShard) and attention layers merge the ranks' partial attentions;
  // attention weights are replicated, not split by heads. Set by whoever forms the group, before the model loads,
  // on backends that implement it.
  virtual bool implements_decode_context_parallel() const { return false; }
  bool decode_context_parallel() const { return decode_context_parallel_ && tensor_parallel_size() > 1; }
  void set_decode_context_parallel(bool on) { decode_context_parallel_ = on; }
  // The share of each sequence's tokens that this rank's KV caches hold.
  KvContextShard kv_context_shard() const {
    return decode_context_parallel() ? KvContextShard{tensor_parallel_rank(), tensor_parallel_size()} : KvContextShard{};
  }
  // All-to-all of rows x [S, ...] (any dtype): the first send_counts[0] rows go to rank 0, the next send_counts[1]
  // to rank 1, and so on (one count per rank, zeros allowed). Returns the rows the ranks sent to this one, grouped
  // by source rank in rank order, each source's in the order it sent them, and sets received_counts to their
  // counts per source. Every rank of the group calls it, with or without rows to send, and all send rows of one
  // dtype and width (a rank without rows passes an empty tensor of them). The CUDA backend reads the counts back to
  // the host (a stream sync) and refuses to be recorded in a CUDA graph.
  virtual Tensor all_to_all_rows(const Tensor& x, std::span<const int64_t> send_counts,
                                 std::vector<int64_t>& received_counts);
  // Row gather and scatter-add of the MoE dispatch and combine: x [T, C] -> [rows.size(), C] with row i x[rows[i]];
  // out[targets[i]] += x[i] for i in order, in float32 (a bf16 out on CUDA is rounded once per row, after its
  // sum; x may be bf16 there).
  virtual Tensor select_rows(const Tensor& x, std::span<const int32_t> rows);
  // The same into `out` [rows.size(), ...] of x's dtype and row width: a recorded step's input, which must stay in
  // the memory its recording read.
  virtual void select_rows_into(const Tensor& x, std::span<const int32_t> rows, Tensor& out);
  virtual void add_rows(Tensor& out, const Tensor& x, std::span<const int32_t> targets);
  // x <- sum of x over the group's ranks; every rank gets the same values.
  virtual void all_reduce_sum(Tensor& x);
  // A row-parallel linear: linear(x, weight, bias) summed over the ranks (each holds its columns of the weight;
  // one rank the bias). Backends with narrow activations sum the partial products before rounding them.
  virtual Tensor linear_all_reduce(const Tensor& x, const Tensor& weight, const Tensor* bias);
  // x [R, C] on every rank -> [R, num_columns]: rank r's columns land at [r * C, (r + 1) * C), cut at num_columns
  // (the last rank's shard may be padded).
  virtual Tensor all_gather_columns(const Tensor& x, int64_t num_columns);
  // [T, H] -> [R, H]; x itself where the rows are every token's in order (logit_rows_are_tokens): read it only.
  virtual Tensor gather_logit_rows(const Tensor& x, const StepContext& step) = 0;
  virtual Tensor argmax(const Tensor& logits) = 0;                                  // [R, V] -> [R] int32
  // Temperature, top-k and top-p sampling of each row of logits [R, V] -> [R] int32 on the device, drafts verified
  // where rows carry them, where samples_on_device(); elsewhere nullopt (the engine's host sampler does it).
  virtual bool samples_on_device() const { return false; }
  virtual std::optional<Tensor> sample(const Tensor& logits, std::span<const RowSampling> rows) {
    (void)logits;
    (void)rows;
    return std::nullopt;
  }

 private:
  bool data_parallel_ = false;
  bool expert_parallel_ = false;
  int64_t num_redundant_experts_ = 0;
  bool decode_context_parallel_ = false;
};

// The backends of one tensor-parallel group. make(rank) is called once per rank, on the thread that will run all of
// that rank's work (the CUDA backend binds the thread to device `rank`).
class BackendGroup {
 public:
  virtual ~BackendGroup() = default;
  virtual int size() const = 0;
  virtual std::unique_ptr<Backend> make(int rank) = 0;
};

// The shape of Backend::select_rows's output, [num_rows, ...] after x's rows, and the checks every backend's
// select_rows_into runs: out is [rows.size(), ...] of x's dtype and row width, and every row lies inside x.
std::vector<int64_t> selected_rows_shape(const Tensor& x, size_t num_rows);
void check_select_rows_into(const Tensor& x, std::span<const int32_t> rows, const Tensor& out);

std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);
// CPU ranks of one process, meeting through shared memory (tests and CI of the sharding logic); `num_threads`
// are shared out among the ranks.
std::unique_ptr<BackendGroup> make_cpu_backend_group(int size, int num_threads = 0);
// The Hopper backend (bf16 activations, float32 accumulation); defined only in builds with TERN_CUDA.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// Devices 0 .. size - 1, meeting through NCCL.
std::unique_ptr<BackendGroup> make_cuda_backend_group(int size);
// CUDA devices this process can use: 0 in a build without CUDA or where no driver or device answers.
int cuda_device_count();
// "auto" becomes "cuda" where this build has CUDA and a device is present, else "cpu"; other names are kept.
std::string resolve_backend_name(const std::string& name);
// "cpu", "cuda" or "auto"; fails clearly for an unknown name or for "cuda" in a build without CUDA.
std::unique_ptr<Backend> make_backend(const std::string& name, int num_threads = 0);
std::unique_ptr<BackendGroup> make_backend_group(const std::string& name, int size, int num_threads = 0);

}  // namespace tern
