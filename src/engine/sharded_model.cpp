#include "engine/sharded_model.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/expert_placement.h"
#include "model/layers/sparse_moe.h"
#include "model/weight_loader.h"

namespace tern {

// A thread that runs one job at a time for its rank.
class ShardedModel::RankThread {
 public:
  RankThread() : thread_([this] { loop(); }) {}
  ~RankThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  void start(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      error_ = nullptr;
    }
    changed_.notify_all();
  }

  // Waits for the job given to start(); its error, if it failed.
  std::exception_ptr wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !job_; });
    return error_;
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [this] { return stopping_ || job_; });
      if (!job_) return;  // stopping with nothing left to do
      lock.unlock();
      std::exception_ptr error;
      try {
        (*job_)();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      job_.reset();
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<std::function<void()>> job_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

std::unique_ptr<ShardedModel> ShardedModel::load(const std::filesystem::path& dir, const std::string& backend_name,
                                                 const ParallelConfig& parallel, int num_threads,
                                                 const LoadProgress::Listener& on_progress,
                                                 OnlineQuantization quantization) {
  const int data_parallel_size = parallel.data_parallel_size;
  const int expert_parallel_size = parallel.expert_parallel_size;
  const int64_t num_redundant_experts = parallel.num_redundant_experts;
  const int decode_context_parallel_size = parallel.decode_context_parallel_size;
  if (data_parallel_size < 1) fail("--data-parallel-size {}: must be >= 1", data_parallel_size);
  const bool data_parallel = data_parallel_size > 1;
  if (data_parallel) {
    if (parallel.tensor_parallel_size != 1) {
      fail("--data-parallel-size {} with --tensor-parallel-size {}: the ranks run attention either data-parallel or "
           "tensor-parallel; give one of them", data_parallel_size, parallel.tensor_parallel_size);
    }
    if (expert_parallel_size != data_parallel_size) {
      fail("--data-parallel-size {}: needs --expert-parallel-size {} (the MoE layers' experts are split over the "
           "data-parallel ranks, which exchange tokens with them)", data_parallel_size, data_parallel_size);
    }
  }
  const int size = data_parallel ? data_parallel_size : parallel.tensor_parallel_size;
  if (expert_parallel_size != 1 && expert_parallel_size != size) {
    fail("--expert-parallel-size {}: must be 1 or the tensor-parallel size {} (experts are split over the "
         "tensor-parallel ranks)", expert_parallel_size, size);
  }
  if (num_redundant_experts < 0 || (num_redundant_experts > 0 && expert_parallel_size == 1)) {
    fail("--num-redundant-experts {}: needs expert parallelism (--expert-parallel-size equal to a tensor-parallel "
         "size above 1) and a count >= 0", num_redundant_experts);
  }
  // The context-parallel group is the tensor-parallel group: attention runs whole on each rank over its share of the
  // tokens while the MLPs stay split, so one set of ranks and collectives serves both (no 2-D rank grid).
  if (decode_context_parallel_size != 1 && decode_context_parallel_size != parallel.tensor_parallel_size) {
    fail("--decode-context-parallel-size {}: must be 1 or the tensor-parallel size {} (the KV cache is split over "
         "the tensor-parallel ranks)", decode_context_parallel_size, parallel.tensor_parallel_size);
  }
  std::unique_ptr<ShardedModel> sharded(new ShardedModel());
  sharded->dir_ = dir;
  sharded->quantization_ = quantization;
  sharded->backend_group_ = make_backend_group(backend_name, size, num_threads);
  sharded->ranks_.resize(static_cast<size_t>(size));
  for (int r = 0; size > 1 && r < size; ++r) sharded->threads_.push_back(std::make_unique<RankThread>());
  LoadProgress progress(on_progress);
  sharded->run_on_ranks([&](int rank) {
    Rank& slot = sharded->ranks_[static_cast<size_t>(rank)];
    slot.owned_backend = sharded->backend_group_->make(rank);
    slot.backend = slot.owned_backend.get();
    if (rank == 0) {
      std::fprintf(stderr, "tern: backend %s%s\n", slot.backend->description().c_str(),
                   size > 1 ? fmt::format(", {} ranks", size).c_str() : "");
    }
    slot.backend->set_expert_parallel(expert_parallel_size > 1, num_redundant_experts);
    slot.backend->set_data_parallel(data_parallel);
    if (decode_context_parallel_size > 1 && !slot.backend->implements_decode_context_parallel()) {
      fail("--decode-context-parallel-size {}: the {} backend does not implement decode context parallelism "
           "(partial attention with its log-sum-exp); use --backend cpu", decode_context_parallel_size,
           slot.backend->name());
    }
    slot.backend->set_decode_context_parallel(decode_context_parallel_size > 1);
    slot.owned_model = load_model(dir, *slot.backend, on_progress ? &progress : nullptr, quantization);
    slot.model = slot.owned_model.get();
  });
  if (on_progress) progress.finish();
  return sharded;
}

ShardedModel::ShardedModel(Model& model, Backend& backend) { ranks_.push_back({&model, &backend, nullptr, nullptr}); }

ShardedModel::~ShardedModel() {
  // Each rank's device memory is released on the rank's own thread.
  try {
    run_on_ranks([this](int rank) {
      Rank& slot = ranks_[static_cast<size_t>(rank)];
      slot.owned_model.reset();
      slot.owned_backend.reset();
    });
  } catch (...) {
    // A destructor cannot report it; the threads still stop below.
  }
}

void ShardedModel::run_on_ranks(const std::function<void(int rank)>& work) {
  if (threads_.empty()) {
    for (int rank = 0; rank < size(); ++rank) work(rank);
    return;
  }
  for (int rank = 0; rank < size(); ++rank) threads_[static_cast<size_t>(rank)]->start([&work, rank] { work(rank); });
  std::exception_ptr first_error;
  for (auto& thread : threads_) {
    std::exception_ptr error = thread->wait();
    if (error && !first_error) first_error = error;
  }
  if (first_error) std::rethrow_exception(first_error);
}

std::vector<std::vector<int64_t>> ShardedModel::take_expert_loads() {
  if (!balances_experts()) fail("expert load balancing: the model was not loaded with expert parallelism");
  std::vector<std::vector<std::vector<int64_t>>> rank_loads(static_cast<size_t>(size()));
  // Every rank takes its counts, so that each rank's next window starts at the same step.
  run_on_ranks([&](int rank) {
    for (SparseMoe* layer : model(rank).expert_layers()) {
      rank_loads[rank].push_back(layer->take_expert_load(backend(rank)));
    }
  });
  // Tensor-parallel ranks all routed the same tokens: rank 0's counts are the load. Data-parallel ranks each
  // routed their own: the load is the sum.
  std::vector<std::vector<int64_t>> loads = std::move(rank_loads[0]);
  for (int rank = 1; data_parallel() && rank < size(); ++rank) {
    for (size_t layer = 0; layer < loads.size(); ++layer) {
      for (size_t e = 0; e < loads[layer].size(); ++e) loads[layer][e] += rank_loads[rank][layer][e];
    }
  }
  return loads;
}

void ShardedModel::place_experts(const std::vector<std::vector<int64_t>>& loads) {
  if (!balances_experts()) fail("expert load balancing: the model was not loaded with expert parallelism");
  const std::vector<SparseMoe*> layers = model(0).expert_layers();
  if (loads.size() != layers.size()) {
    fail("expert load balancing: loads for {} MoE layers, the model has {}", loads.size(), layers.size());
  }
  std::vector<std::optional<ExpertPlacement>> placements(layers.size());  // nullopt: the layer stays
  for (size_t i = 0; i < layers.size(); ++i) {
    const ExpertPlacement& current = *layers[i]->placement();
    if (std::all_of(loads[i].begin(), loads[i].end(), [](int64_t n) { return n == 0; })) continue;
    ExpertPlacement balanced = balanced_expert_placement(loads[i], current.num_slots(), current.num_ranks);
    if (balanced != current) placements[i] = std::move(balanced);
  }
  if (std::none_of(placements.begin(), placements.end(), [](const auto& p) { return p.has_value(); })) return;
  const Checkpoint checkpoint = Checkpoint::open(dir_, nullptr, quantization_);
  run_on_ranks([&](int rank) {
    WeightLoader weights(checkpoint, backend(rank));
    const std::vector<SparseMoe*> rank_layers = model(rank).expert_layers();
    for (size_t i = 0; i < rank_layers.size(); ++i) {
      if (placements[i]) rank_layers[i]->place_experts(weights, *placements[i]);
    }
    backend(rank).discard_recorded_steps();  // they read the replaced tensors
  });
}

void ShardedModel::rebalance_experts() { place_experts(take_expert_loads()); }

}  // namespace tern
