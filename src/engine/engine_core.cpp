#include "engine/engine_core.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"

namespace tern {

namespace {

KvCacheBudget resolve_budget(const EngineConfig& config, Backend& backend, int64_t bytes_per_token) {
  if (config.num_kv_blocks > 0) return {bytes_per_token, config.block_size, config.num_kv_blocks};
  if (config.kv_cache_memory_bytes > 0) {
    return kv_cache_budget_for_memory(bytes_per_token, config.block_size, config.kv_cache_memory_bytes);
  }
  if (!(config.kv_cache_memory_fraction > 0.0 && config.kv_cache_memory_fraction <= 1.0)) {
    fail("engine: KV cache memory fraction {} must be in (0, 1]", config.kv_cache_memory_fraction);
  }
  if (backend.name() != "cpu") {
    fail("engine: the {} backend cannot report its free memory yet; give the KV cache memory in bytes", backend.name());
  }
  const auto available = static_cast<double>(host_available_memory_bytes());
  return kv_cache_budget_for_memory(bytes_per_token, config.block_size,
                                    static_cast<int64_t>(available * config.kv_cache_memory_fraction));
}

}  // namespace

int64_t measure_kv_bytes_per_token(Backend& backend, const std::vector<KvLayerSpec>& layers, int32_t block_size) {
  const KvCache probe = backend.allocate_kv_cache(layers, 1, block_size);
  int64_t bytes = 0;
  for (const auto& t : probe.keys) bytes += static_cast<int64_t>(t.bytes());
  for (const auto& t : probe.values) bytes += static_cast<int64_t>(t.bytes());
  return bytes / block_size;
}

EngineCore::EngineCore(Model& model, Backend& backend, EngineConfig config, TextStreamFactory text_streams)
    : model_(model) {
  if (config.block_size < 1) fail("engine: block size {} must be >= 1", config.block_size);
  const int64_t model_len = model.config().max_position_embeddings;
  max_model_len_ = config.max_model_len > 0 ? config.max_model_len : model_len;
  if (model_len > 0 && max_model_len_ > model_len) {
    fail("engine: max_model_len {} exceeds the model's context of {}", max_model_len_, model_len);
  }
  const auto layers = model.kv_layers();
  budget_ = resolve_budget(config, backend, measure_kv_bytes_per_token(backend, layers, config.block_size));
  if (config.log_kv_cache) {
    std::fprintf(stderr,
                 "tern: KV cache: %lld bytes per token, %d blocks of %d tokens = %lld tokens, %.1f MiB\n",
                 static_cast<long long>(budget_.bytes_per_token), budget_.num_blocks, budget_.block_size,
                 static_cast<long long>(budget_.num_tokens()), budget_.total_bytes() / 1048576.0);
  }
  kv_ = std::make_unique<KvCacheManager>(budget_.num_blocks, budget_.block_size, config.enable_prefix_cache);
  SchedulerConfig scheduler_config;
  scheduler_config.max_num_batched_tokens = config.max_num_batched_tokens;
  scheduler_config.max_num_seqs = config.max_num_seqs;
  scheduler_config.max_model_len = max_model_len_;
  scheduler_config.enable_chunked_prefill = config.enable_chunked_prefill;
  scheduler_config.policy = config.policy;
  scheduler_config.eos_token_ids = model.config().eos_token_ids;
  scheduler_ = std::make_unique<Scheduler>(std::move(scheduler_config), *kv_, std::move(text_streams));
  runner_ = std::make_unique<ModelRunner>(model, backend,
                                          backend.allocate_kv_cache(layers, budget_.num_blocks, budget_.block_size));
}

void EngineCore::validate(const GenerateRequest& request) const {
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < request.prompt_token_ids.size(); ++i) {
    const int32_t id = request.prompt_token_ids[i];
    if (id < 0 || id >= vocab) fail("request: prompt token {} (position {}) outside the vocabulary of {}", id, i, vocab);
  }
  request.sampling.validate(vocab);
  request.stop.validate(vocab);
  scheduler_->validate(request);
}

void EngineCore::add_request(uint64_t request_id, GenerateRequest request) {
  validate(request);
  scheduler_->add_request(request_id, std::move(request));
}

std::vector<RequestOutput> EngineCore::abort(uint64_t request_id, const std::string& error) {
  return scheduler_->abort(request_id, error);
}

std::vector<RequestOutput> EngineCore::step() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const StepPlan plan = scheduler_->schedule();
  const auto scheduled = Clock::now();
  const StepResult result = runner_->execute(plan);
  const auto executed = Clock::now();
  auto outputs = scheduler_->update(plan, result);
  const auto updated = Clock::now();
  last_step_timing_ = {std::chrono::duration<double>(scheduled - start).count(),
                       std::chrono::duration<double>(executed - scheduled).count(),
                       std::chrono::duration<double>(updated - executed).count(), plan.num_tokens(),
                       static_cast<int32_t>(plan.chunks.size())};
  return outputs;
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.num_kv_blocks = kv_->num_blocks();
  s.num_free_kv_blocks = kv_->num_available_blocks();
  s.kv_usage = kv_->usage();
  s.prefix_query_tokens = kv_->prefix_stats().num_query_tokens;
  s.prefix_hit_tokens = kv_->prefix_stats().num_hit_tokens;
  s.prefix_hit_rate = kv_->prefix_stats().hit_rate();
  const auto& c = scheduler_->counters();
  s.num_preemptions = c.num_preemptions;
  s.num_computed_tokens = c.num_computed_tokens;
  s.num_generated_tokens = c.num_generated_tokens;
  s.num_finished_requests = c.num_finished_requests;
  s.num_steps = c.num_steps;
  return s;
}

}  // namespace tern
