#pragma once
// The device side of a step: turns a StepPlan into a ForwardBatch, runs the model over the paged KV cache, and
// samples each finished chunk's next token with that sequence's sampler. Owns the KV cache storage and the
// per-sequence sampling state; knows nothing of scheduling.
#include <cstdint>
#include <unordered_map>

#include "backend/backend.h"
#include "engine/sampler.h"
#include "engine/step_plan.h"
#include "model/model.h"

namespace tern {

class ModelRunner {
 public:
  ModelRunner(Model& model, Backend& backend, KvCache cache);

  StepResult execute(const StepPlan& plan);
  const KvCache& kv_cache() const { return cache_; }

 private:
  Model& model_;
  Backend& backend_;
  KvCache cache_;
  std::unordered_map<uint64_t, SequenceSampler> samplers_;
};

}  // namespace tern
