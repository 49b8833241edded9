#pragma once
// A model on the ranks of a tensor-parallel group: rank r's shard of the weights on rank r's backend (device r),
// and each rank's work on a thread the rank keeps for its life (a CUDA thread stays bound to its device).
// One process with a thread per GPU rather than a process per GPU: the scheduler, tokenizer and server exist once,
// every rank reads the same StepPlan from memory instead of receiving it over RPC, and NCCL's single-process
// set-up needs no id exchange. A group of one runs on the caller's thread, exactly as without this class.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/load_progress.h"
#include "model/model.h"

namespace tern {

// How a model is spread over the ranks of one process (docs/parallelism.md).
struct ParallelConfig {
  int tensor_parallel_size = 1;
  // 1 (every rank holds every expert of the MoE layers) or the group size (each rank its share:
  // Backend::expert_parallel), with num_redundant_experts extra expert slots per MoE layer for replicas.
  int expert_parallel_size = 1;
  int64_t num_redundant_experts = 0;
  // 1, or the tensor-parallel size: each rank caches every size-th token of each sequence and the attention
  // layers, whole on every rank, merge the ranks' partial attentions (Backend::decode_context_parallel).
  int decode_context_parallel_size = 1;
  // > 1 (with tensor-parallel size 1 and expert-parallel size equal to it): that many ranks with
  // data-parallel attention (Backend::data_parallel).
  int data_parallel_size = 1;
};

class ShardedModel {
 public:
  // Loads the model directory on the ranks `parallel` asks for (the tensor- or data-parallel size) of backend
  // `backend_name` ("cpu": threads of this process sharing `num_threads`; "cuda": devices 0 .. size - 1), all ranks
  // at once. Combinations that do not fit fail naming the flags.
  // `backend_name` "auto" picks CUDA where there is a device. Prints the backend chosen on stderr; `on_progress`,
  // where given, hears how many bytes of weights are loaded (LoadProgress). `quantization` as load_model's.
  static std::unique_ptr<ShardedModel> load(const std::filesystem::path& dir, const std::string& backend_name,
                                            const ParallelConfig& parallel = {}, int num_threads = 0,
                                            const LoadProgress::Listener& on_progress = {},
                                            OnlineQuantization quantization = OnlineQuantization::none);
  // One whole model on one backend, both owned by the caller.
  ShardedModel(Model& model, Backend& backend);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  Model& model(int rank) const { return *ranks_.at(static_cast<size_t>(rank)).model; }
  Backend& backend(int rank) const { return *ranks_.at(static_cast<size_t>(rank)).backend; }
  const ModelConfig& config() const { return model(0).config(); }
  // Data-parallel attention: each rank runs its own sequences (ScheduledChunk::rank) with its own KV cache.
  bool data_parallel() const { return backend(0).data_parallel(); }
  // How the weights were quantized as they loaded (none for a model loaded by the caller).
  OnlineQuantization quantization() const { return quantization_; }

  // Runs work(rank) for every rank at once, each on its rank's thread, and returns when all have finished;
  // rethrows the first error. Ranks meet in collectives, so every rank must be given the same work.
  void run_on_ranks(const std::function<void(int rank)>& work);

  // Expert-parallel load balancing (EPLB), for models loaded with expert parallelism. Call these between steps.
  bool balances_experts() const { return !dir_.empty() && backend(0).expert_parallel(); }
  // Per MoE layer, the tokens routed to each logical expert since the last call or since loading: rank 0's
  // counters (every tensor-parallel rank's router saw the same tokens), or their sum over data-parallel ranks.
  std::vector<std::vector<int64_t>> take_expert_loads();
  // Per MoE layer, the balanced placement for `loads` (balanced_expert_placement); every rank reloads the weights
  // of its slots from the checkpoint, all ranks at once. Layers whose placement stays the same, or that saw no
  // tokens, are left as they are.
  void place_experts(const std::vector<std::vector<int64_t>>& loads);
  // place_experts(take_expert_loads()).
  void rebalance_experts();

 private:
  class RankThread;
  struct Rank {
    Model* model = nullptr;
    Backend* backend = nullptr;
    std::unique_ptr<Model> owned_model;
    std::unique_ptr<Backend> owned_backend;
  };

  ShardedModel() = default;

  std::filesystem::path dir_;  // the checkpoint, which rebalancing reloads experts from; empty when not loaded here
  OnlineQuantization quantization_ = OnlineQuantization::none;  // as the experts were loaded, for their reloads
  std::unique_ptr<BackendGroup> backend_group_;
  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<RankThread>> threads_;  // empty for a group of one
};

}  // namespace tern
