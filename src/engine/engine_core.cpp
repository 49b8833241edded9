#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <cstdio>
#include <set>

#include "backend/kv_block_transfer.h"
#include "core/error.h"
#include "engine/draft_model_proposer.h"
#include "engine/host_pool_disk_tier.h"
#include "engine/mtp_proposer.h"
#include "engine/ngram_proposer.h"
#include "engine/request_field_error.h"
#include "model/arch/llama_eagle3.h"
#include "model/sequence_runner.h"

namespace tern {

namespace {

// A step of max_num_batched_tokens prompt tokens with max_num_seqs logit rows (at most one per token) on a
// scratch cache, so that the device memory measured afterwards includes the largest step's activations, which
// the backend's caching allocator keeps.
void profile_largest_step(Model& model, Backend& backend, const EngineConfig& config) {
  const int32_t num_tokens = std::max(config.max_num_batched_tokens, 1);
  const int64_t num_blocks = (num_tokens + config.block_size - 1) / config.block_size;
  const auto num_groups = static_cast<int64_t>(kv_cache_groups(model.kv_layers()).size());
  KvCache cache =
      backend.allocate_kv_cache(model.kv_layers(), num_groups * num_blocks, config.block_size, config.kv_cache_dtype);
  ForwardBatch batch;
  batch.token_ids.assign(static_cast<size_t>(num_tokens), 0);
  SequenceChunk& seq = batch.sequences.emplace_back();
  seq.num_new_tokens = num_tokens;
  seq.block_tables = own_block_tables(num_groups, num_blocks);
  const int32_t num_rows = std::min(std::max(config.max_num_seqs, 1), num_tokens);
  for (int32_t r = num_tokens - num_rows; r < num_tokens; ++r) batch.logit_rows.push_back(r);
  const auto step = backend.begin_step(batch);
  backend.to_host_i32(backend.argmax(model.forward(*step, cache)));
}

// The KV cache's share of the memory a backend has, when no size is given: a fraction of the device after the
// weights and the largest step, or of the host memory available for a backend whose cache lives there.
int64_t fractional_kv_memory_bytes(const EngineConfig& config, Backend& backend, Model& model,
                                   int64_t bytes_per_token) {
  if (!(config.kv_cache_memory_fraction > 0.0 && config.kv_cache_memory_fraction <= 1.0)) {
    fail("engine: KV cache memory fraction {} must be in (0, 1]", config.kv_cache_memory_fraction);
  }
  if (backend.device_memory()) {
    // vLLM's --gpu-memory-utilization: the KV cache gets what is left of that fraction of the device after the
    // weights and the largest step, less one block for the padding of recorded decode steps.
    profile_largest_step(model, backend, config);
    const DeviceMemory memory = *backend.device_memory();
    const double used = static_cast<double>(memory.total_bytes - memory.free_bytes);
    const auto budget = static_cast<int64_t>(config.kv_cache_memory_fraction * memory.total_bytes - used);
    if (budget <= 0) {
      fail("engine: {:.1f} GiB of the device's {:.1f} GiB are in use after loading and a step of {} tokens, more "
           "than the memory fraction {} allows; raise it or lower max_num_batched_tokens",
           used / (1 << 30), memory.total_bytes / double(1 << 30), config.max_num_batched_tokens,
           config.kv_cache_memory_fraction);
    }
    return budget - bytes_per_token * config.block_size;
  }
  if (!backend.kv_cache_in_host_memory()) {
    fail("engine: the {} backend reports no free memory to size the KV cache by; give its size "
         "(--kv-cache-memory)", backend.name());
  }
  return static_cast<int64_t>(static_cast<double>(host_available_memory_bytes()) * config.kv_cache_memory_fraction);
}

// The pool: the blocks asked for, the blocks a byte budget holds, or the blocks a fraction of the backend's memory
// holds but no more than max_num_seqs sequences of max_model_len tokens can use (a small model on a large host
// would otherwise reserve most of its memory).
KvCacheBudget resolve_budget(const EngineConfig& config, Backend& backend, Model& model, int64_t bytes_per_token,
                             int64_t max_model_len) {
  if (config.num_kv_blocks > 0) return {bytes_per_token, config.block_size, config.num_kv_blocks};
  if (config.kv_cache_memory_bytes > 0) {
    return kv_cache_budget_for_memory(bytes_per_token, config.block_size, config.kv_cache_memory_bytes);
  }
  KvCacheBudget budget = kv_cache_budget_for_memory(
      bytes_per_token, config.block_size, fractional_kv_memory_bytes(config, backend, model, bytes_per_token));
  const int64_t usable_blocks =
      static_cast<int64_t>(std::max(config.max_num_seqs, 1)) *
      kv_blocks_held(group_sliding_windows(kv_cache_groups(model.kv_layers())), config.block_size, max_model_len);
  budget.num_blocks = static_cast<int32_t>(std::min<int64_t>(budget.num_blocks, usable_blocks));
  return budget;
}

// The draft model of speculative decoding, on the target's backend; it must read and write the target's token ids.
std::unique_ptr<Model> load_draft_model(const std::filesystem::path& dir, const Model& target, Backend& backend,
                                        OnlineQuantization quantization) {
  if (!std::filesystem::is_directory(dir)) {
    fail("--speculative-config: the draft model '{}' is not a directory", dir.string());
  }
  auto draft = load_model(dir, backend, nullptr, quantization);
  if (draft->config().vocab_size != target.config().vocab_size) {
    fail("--speculative-config: the draft model '{}' has a vocabulary of {} tokens and the target one of {}; a "
         "draft model must share the target's tokenizer", dir.string(), draft->config().vocab_size,
         target.config().vocab_size);
  }
  return draft;
}

// The multi-token prediction layer of speculative decoding, from `dir` (the target's checkpoint unless another was
// given), on the target's backend; it reads the target's hidden states and writes its token ids.
std::unique_ptr<MtpModel> load_target_mtp_layer(const std::filesystem::path& dir, const Model& target,
                                                Backend& backend, OnlineQuantization quantization) {
  if (!std::filesystem::is_directory(dir)) {
    fail("--speculative-config: deepseek_mtp: the checkpoint '{}' is not a directory", dir.string());
  }
  auto mtp = load_mtp_model(dir, backend, quantization);
  if (mtp->config().vocab_size != target.config().vocab_size ||
      mtp->config().hidden_size != target.config().hidden_size) {
    fail("--speculative-config: the multi-token prediction layer of '{}' has vocabulary {} and hidden size {}, the "
         "target {} and {}", dir.string(), mtp->config().vocab_size, mtp->config().hidden_size,
         target.config().vocab_size, target.config().hidden_size);
  }
  return mtp;
}

// The EAGLE-3 head of speculative decoding in `dir`, on the target's backend; it reads the target's layer inputs and
// writes its token ids.
std::unique_ptr<MtpModel> load_eagle3_head(const std::filesystem::path& dir, const Model& target, Backend& backend,
                                           OnlineQuantization quantization) {
  if (!std::filesystem::is_directory(dir)) {
    fail("--speculative-config: eagle3: the head '{}' is not a directory", dir.string());
  }
  return load_eagle3_model(dir, target, backend, quantization);
}

// The host tier's blocks: as many of the device pool's blocks as host_kv_cache_bytes holds.
int32_t host_kv_blocks(const EngineConfig& config, const KvCacheBudget& budget) {
  if (config.host_kv_cache_bytes < 0) fail("--host-kv-cache-memory: {} bytes", config.host_kv_cache_bytes);
  if (config.host_kv_cache_bytes == 0) {
    if (!config.kv_cache_dir.empty()) {
      fail("--kv-cache-dir: the disk tier lies under the host tier; give it one (--host-kv-cache-memory)");
    }
    if (config.kv_write_through) fail("--kv-write-policy write_through: needs a host tier (--host-kv-cache-memory)");
    return 0;
  }
  if (!config.enable_prefix_cache) {
    fail("--host-kv-cache-memory: the host tier holds the prefix cache's blocks; it needs prefix caching (leave out "
         "--no-prefix-cache)");
  }
  if (config.speculative && config.speculative->method == SpeculativeMethod::kDraftModel) {
    fail("--host-kv-cache-memory: a draft model keeps a KV cache of its own, which the host tier does not hold; use "
         "it without a draft model (n-gram speculation works)");
  }
  if (config.kv_cache_dir_bytes <= 0) fail("--kv-cache-dir-size: {} bytes", config.kv_cache_dir_bytes);
  const int64_t block_bytes = budget.bytes_per_token * budget.block_size;
  const int64_t num_blocks = config.host_kv_cache_bytes / block_bytes;
  if (num_blocks < 1) {
    fail("--host-kv-cache-memory: {} bytes hold no KV block of {} bytes", config.host_kv_cache_bytes, block_bytes);
  }
  if (num_blocks > std::numeric_limits<int32_t>::max()) {
    fail("--host-kv-cache-memory: {} blocks are more than a pool holds", num_blocks);
  }
  return static_cast<int32_t>(num_blocks);
}

}  // namespace

std::string EngineCore::kv_identity(const EngineConfig& config, int data_parallel_rank) const {
  const KvCache& cache = runners_.front()->kv_cache();
  std::string identity = config.model_identity + "\nbackend " + model_.backend(0).name() + "\nlayers " +
                         kv_layers_summary(cache.layers) + "\nKV cache dtype " + kv_cache_dtype_name(cache.dtype) +
                         "\nblock " + std::to_string(cache.block_size) +
                         " tokens\nbytes per layer block";
  for (size_t l = 0; l < cache.layers.size(); ++l) identity += " " + std::to_string(kv_block_bytes(cache, static_cast<int>(l)));
  identity += "\ntensor-parallel ranks " + std::to_string(model_.data_parallel() ? 1 : model_.size());
  if (model_.data_parallel()) identity += "\ndata-parallel rank " + std::to_string(data_parallel_rank);
  return identity;
}

void EngineCore::run_tier_copies() {
  for (size_t k = 0; k < kvs_.size(); ++k) {
    const std::vector<KvTierCopy> copies = kvs_[k]->take_tier_copies();
    if (copies.empty()) continue;
    if (model_.data_parallel()) {
      runners_[k]->copy_tier_blocks(copies);
    } else {
      model_.run_on_ranks([&](int rank) { runners_[rank]->copy_tier_blocks(copies); });
    }
  }
}

int64_t measure_kv_bytes_per_token(Backend& backend, const std::vector<KvLayerSpec>& layers, int32_t block_size,
                                   KvCacheDtype dtype) {
  const KvCache probe = backend.allocate_kv_cache(layers, 1, block_size, dtype);
  // Tensors that layers of different KV cache groups share count once.
  std::set<const void*> counted;
  int64_t bytes = 0;
  for (const auto* tensors : {&probe.keys, &probe.values, &probe.states}) {
    for (const auto& t : *tensors) {
      if (t.bytes() > 0 && counted.insert(t.data).second) bytes += static_cast<int64_t>(t.bytes());
    }
  }
  return bytes / block_size;
}

EngineCore::EngineCore(Model& model, Backend& backend, EngineConfig config, TextStreamFactory text_streams)
    : single_rank_(std::make_unique<ShardedModel>(model, backend)), model_(*single_rank_) {
  start(std::move(config), std::move(text_streams));
}

EngineCore::EngineCore(ShardedModel& model, EngineConfig config, TextStreamFactory text_streams) : model_(model) {
  start(std::move(config), std::move(text_streams));
}

void EngineCore::start(EngineConfig config, TextStreamFactory text_streams) {
  if (config.block_size < 1) fail("engine: block size {} must be >= 1", config.block_size);
  if (config.eplb_interval_steps < 0 || (config.eplb_interval_steps > 0 && !model_.balances_experts())) {
    fail("--eplb-interval {}: needs expert parallelism (--expert-parallel-size equal to a tensor-parallel size "
         "above 1) and a step count >= 0", config.eplb_interval_steps);
  }
  eplb_interval_steps_ = config.eplb_interval_steps;
  const int64_t model_len = model_.config().max_position_embeddings;
  max_model_len_ = config.max_model_len > 0 ? config.max_model_len : model_len;
  if (model_len > 0 && max_model_len_ > model_len) {
    fail("engine: max_model_len {} exceeds the model's context of {}", max_model_len_, model_len);
  }
  const int num_ranks = model_.size();
  // The draft model's or MTP layer's copy on each rank (sharded like the target under tensor parallelism).
  std::vector<std::unique_ptr<Model>> draft_models;
  std::vector<std::unique_ptr<MtpModel>> mtp_layers;
  if (config.speculative) {
    // Prompt lookup is host-only: every tensor-parallel rank verifies the same drafts in its forward and the first
    // samples, and a data-parallel rank verifies its own sequences' drafts. A draft model, DeepSeek's MTP layer or
    // an EAGLE-3 head is loaded on every tensor-parallel rank like the target and runs on all of them alike
    // (DraftModelProposer, MtpProposer); data-parallel ranks would each need their own drafting of their own
    // sequences. Decode context parallelism splits a sequence's KV over the ranks in a way the verify bookkeeping
    // does not follow yet.
    const SpeculativeMethod method = config.speculative->method;
    const bool context_parallel = model_.backend(0).decode_context_parallel();
    const bool tensor_parallel = num_ranks > 1 && !model_.data_parallel() && !context_parallel;
    const bool loads_on_every_rank = method != SpeculativeMethod::kNgram;
    const bool fits = num_ranks == 1 || (method == SpeculativeMethod::kNgram && !context_parallel) ||
                      (loads_on_every_rank && tensor_parallel);
    if (!fits) {
      fail("--speculative-config: {} speculative decoding runs on one rank{}; prompt lookup (\"method\": \"ngram\") "
           "also under tensor or data parallelism, not decode context parallelism; this engine has {} ranks{}",
           speculative_method_name(method), loads_on_every_rank ? " or under tensor parallelism" : "", num_ranks,
           context_parallel ? " in decode context parallel" : model_.data_parallel() ? " in data parallel" : "");
    }
    // Loaded before the KV pool is sized, so that its weights count as used memory.
    const std::filesystem::path& dir = config.speculative->draft_model_dir;
    const OnlineQuantization quantization = drafter_quantization(*config.speculative, model_.quantization());
    if (method == SpeculativeMethod::kDraftModel) {
      draft_models.resize(static_cast<size_t>(num_ranks));
      model_.run_on_ranks([&](int rank) {
        draft_models[rank] = load_draft_model(dir, model_.model(rank), model_.backend(rank), quantization);
      });
    } else if (loads_on_every_rank) {
      // An EAGLE-3 head runs as an MTP layer does (MtpProposer).
      mtp_layers.resize(static_cast<size_t>(num_ranks));
      model_.run_on_ranks([&](int rank) {
        mtp_layers[rank] = method == SpeculativeMethod::kDeepseekMtp
                               ? load_target_mtp_layer(dir, model_.model(rank), model_.backend(rank), quantization)
                               : load_eagle3_head(dir, model_.model(rank), model_.backend(rank), quantization);
      });
    }
  }
  std::vector<KvCacheBudget> budgets(static_cast<size_t>(num_ranks));
  bool on_device = false;
  model_.run_on_ranks([&](int rank) {
    Backend& backend = model_.backend(rank);
    Model& model = model_.model(rank);
    if (rank == 0) on_device = backend.device_memory().has_value();
    // A draft model's (or MTP layer's) pool has as many blocks as the target's: a block of the budget pays for both.
    const int64_t draft_bytes_per_token =
        !draft_models.empty() ? measure_kv_bytes_per_token(backend, draft_models[rank]->kv_layers(),
                                                           config.block_size, config.kv_cache_dtype)
        : !mtp_layers.empty() ? measure_kv_bytes_per_token(backend, mtp_layers[rank]->kv_layers(),
                                                           config.block_size, config.kv_cache_dtype)
                    : 0;
    budgets[rank] = resolve_budget(
        config, backend, model,
        measure_kv_bytes_per_token(backend, model.kv_layers(), config.block_size, config.kv_cache_dtype) +
            draft_bytes_per_token,
        max_model_len_);
  });
  budget_ = *std::min_element(budgets.begin(), budgets.end(),
                              [](const auto& a, const auto& b) { return a.num_blocks < b.num_blocks; });
  const auto layers = model_.model(0).kv_layers();
  const auto groups = kv_cache_groups(layers);
  // Under decode context parallelism each rank's block of block_size slots holds its share of a scheduler block of
  // block_size * ranks tokens (KvContextShard): the scheduler sees the context of all ranks' memory.
  const KvContextShard context_shard = model_.backend(0).kv_context_shard();
  const auto scheduler_block_size = static_cast<int32_t>(context_shard.tokens_per_block(budget_.block_size));
  fit_max_model_len_to_cache(groups, scheduler_block_size, config.max_model_len > 0);
  if (config.log_kv_cache) {
    const char* per_rank = num_ranks == 1            ? ""
                           : model_.data_parallel() ? ", per data-parallel rank"
                                                    : ", per tensor-parallel rank";
    std::fprintf(stderr,
                 "tern: KV cache: %lld bytes per token (%s layers, KV cache groups: %zu%s%s), %d blocks of %d tokens "
                 "= %lld tokens, %.1f MiB%s\n",
                 static_cast<long long>(budget_.bytes_per_token), kv_layers_summary(layers).c_str(), groups.size(),
                 config.kv_cache_dtype == KvCacheDtype::fp8_e4m3 ? ", fp8_e4m3 keys and values" : "", per_rank,
                 budget_.num_blocks, budget_.block_size,
                 static_cast<long long>(budget_.num_tokens()), budget_.total_bytes() / 1048576.0,
                 num_ranks > 1 ? " on each rank" : "");
    if (context_shard.size > 1) {
      std::fprintf(stderr,
                   "tern: decode context parallelism over %d ranks: each rank caches 1 token in %d; %d blocks of "
                   "%d tokens = %lld tokens of context\n",
                   context_shard.size, context_shard.size, budget_.num_blocks, scheduler_block_size,
                   static_cast<long long>(budget_.num_blocks) * scheduler_block_size);
    }
  }
  overlap_schedule_ = config.overlap_schedule;
  if (config.speculative) {
    const SpeculativeConfig& speculative = *config.speculative;
    num_speculative_tokens_ = speculative.num_speculative_tokens;
    if (!draft_models.empty()) {
      proposer_ = std::make_unique<DraftModelProposer>(model_, std::move(draft_models), budget_.num_blocks,
                                                       budget_.block_size, num_speculative_tokens_,
                                                       on_device ? config.max_num_seqs : 0, config.kv_cache_dtype);
    } else if (!mtp_layers.empty()) {
      proposer_ = std::make_unique<MtpProposer>(model_, std::move(mtp_layers), budget_.num_blocks, budget_.block_size,
                                                config.enable_prefix_cache, num_speculative_tokens_,
                                                on_device ? config.max_num_seqs : 0, config.kv_cache_dtype);
    } else {
      proposer_ = std::make_unique<NgramProposer>(speculative.prompt_lookup_min, speculative.prompt_lookup_max);
    }
    if (config.log_kv_cache) {
      std::fprintf(stderr, "tern: speculative decoding: %s, %d tokens per step\n",
                   std::string(speculative_method_name(speculative.method)).c_str(), num_speculative_tokens_);
    }
  }
  const bool data_parallel = model_.data_parallel();
  const int32_t num_host_blocks = host_kv_blocks(config, budget_);
  if (config.log_kv_cache && num_host_blocks > 0) {
    std::fprintf(stderr, "tern: host KV cache: %d blocks = %lld tokens, %.1f MiB%s (%s)%s%s\n", num_host_blocks,
                 static_cast<long long>(num_host_blocks) * scheduler_block_size,
                 static_cast<double>(num_host_blocks) * budget_.bytes_per_token * budget_.block_size / 1048576.0,
                 num_ranks > 1 ? " on each rank" : "", config.kv_write_through ? "write-through" : "write-back",
                 config.kv_cache_dir.empty() ? "" : "; disk tier in ", config.kv_cache_dir.c_str());
  }
  runners_.resize(static_cast<size_t>(num_ranks));
  const auto record_start = std::chrono::steady_clock::now();
  std::vector<int> recorded(static_cast<size_t>(num_ranks));
  model_.run_on_ranks([&](int rank) {
    Backend& backend = model_.backend(rank);
    Model& model = model_.model(rank);
    // Tensor-parallel ranks other than the first only compute their shards; data-parallel ranks sample their own
    // sequences.
    const bool samples = rank == 0 || data_parallel;
    const int32_t data_parallel_rank = data_parallel ? rank : -1;
    if (on_device) {
      // Device backends get one block past the scheduler's pool, which pads recorded decode steps (CUDA graphs).
      runners_[rank] = std::make_unique<ModelRunner>(
          model, backend,
          backend.allocate_kv_cache(model.kv_layers(), budget_.num_blocks + 1, budget_.block_size,
                                    config.kv_cache_dtype),
          budget_.num_blocks, config.max_num_seqs, samples, data_parallel_rank);
    } else {
      runners_[rank] = std::make_unique<ModelRunner>(
          model, backend,
          backend.allocate_kv_cache(model.kv_layers(), budget_.num_blocks, budget_.block_size, config.kv_cache_dtype),
          -1, 0, samples, data_parallel_rank);
    }
    if (num_host_blocks > 0) runners_[rank]->allocate_host_kv_cache(num_host_blocks);
    if (proposer_ && proposer_->reads_hidden_states()) {
      std::vector<int32_t> layers = proposer_->target_layer_inputs();
      if (layers.empty()) {
        runners_[rank]->return_hidden_states();
      } else {
        runners_[rank]->return_layer_inputs(std::move(layers));
      }
    }
    // Verify steps too: each sequence its last token and up to k drafts.
    if (on_device) recorded[rank] = runners_[rank]->record_steps(1 + num_speculative_tokens_);
  });
  if (config.log_kv_cache && recorded[0] > 0) {
    std::fprintf(stderr, "tern: recorded %d decode%s steps in %.2f s\n", recorded[0],
                 num_speculative_tokens_ > 0 ? " and verify" : "",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - record_start).count());
  }
  std::vector<KvCacheManager*> rank_kvs;
  for (int r = 0; r < (data_parallel ? num_ranks : 1); ++r) {
    KvTierConfig tiers;
    tiers.num_host_blocks = num_host_blocks;
    tiers.write_through = config.kv_write_through;
    if (!config.kv_cache_dir.empty()) {
      // A data-parallel rank's tier holds its own runner's blocks; tensor-parallel ranks write theirs together.
      std::vector<ModelRunner*> ranks;
      for (int t = 0; t < num_ranks; ++t) {
        if (!data_parallel || t == r) ranks.push_back(runners_[static_cast<size_t>(t)].get());
      }
      disk_tiers_.push_back(std::make_unique<HostPoolDiskTier>(
          std::move(ranks), config.kv_cache_dir, kv_identity(config, r), config.kv_cache_dir_bytes));
      tiers.disk = disk_tiers_.back().get();
    }
    kvs_.push_back(std::make_unique<KvCacheManager>(budget_.num_blocks, scheduler_block_size, config.enable_prefix_cache,
                                                    shareable_prefix_tokens(layers), group_sliding_windows(groups),
                                                    tiers));
    rank_kvs.push_back(kvs_.back().get());
  }
  SchedulerConfig scheduler_config;
  scheduler_config.max_num_batched_tokens = config.max_num_batched_tokens;
  scheduler_config.max_num_seqs = config.max_num_seqs;
  scheduler_config.max_model_len = max_model_len_;
  scheduler_config.enable_chunked_prefill = config.enable_chunked_prefill;
  scheduler_config.policy = config.policy;
  scheduler_config.eos_token_ids = model_.config().eos_token_ids;
  scheduler_ = std::make_unique<Scheduler>(std::move(scheduler_config), std::move(rank_kvs), std::move(text_streams));
}

void EngineCore::fit_max_model_len_to_cache(const std::vector<KvCacheGroup>& groups, int32_t scheduler_block_size,
                                            bool max_model_len_given) {
  const std::vector<int64_t> windows = group_sliding_windows(groups);
  const auto fits = [&](int64_t num_tokens) {
    return kv_blocks_held(windows, scheduler_block_size, num_tokens) <= budget_.num_blocks;
  };
  if (fits(max_model_len_)) return;
  // The longest sequence the pool holds (kv_blocks_held grows with the length).
  int64_t longest = 0;
  for (int64_t step = int64_t{1} << 40; step > 0; step /= 2) {
    if (longest + step < max_model_len_ && fits(longest + step)) longest += step;
  }
  if (max_model_len_given || longest == 0) {
    fail("engine: max_model_len {} is more than the KV cache holds ({} blocks of {} tokens: {} tokens for one "
         "sequence); give the cache more memory (--kv-cache-memory, --gpu-memory-utilization) or lower "
         "--max-model-len", max_model_len_, budget_.num_blocks, scheduler_block_size, longest);
  }
  std::fprintf(stderr,
               "tern: warning: the model's context of %lld tokens is more than the KV cache holds; max_model_len "
               "lowered to %lld (give the cache more memory to serve the whole context)\n",
               static_cast<long long>(max_model_len_), static_cast<long long>(longest));
  max_model_len_ = longest;
}

StepResult EngineCore::merge_results(const StepPlan& plan, std::vector<StepResult> results) const {
  if (!model_.data_parallel()) return std::move(results.front());
  // Each rank's tokens are its sampled chunks' in plan order: one each, or a verified chunk's kept drafts and the
  // token after them.
  std::vector<size_t> next(results.size(), 0);
  StepResult merged;
  for (const auto& chunk : plan.chunks) {
    if (!chunk.sample) continue;
    const auto rank = static_cast<size_t>(chunk.rank);
    const std::vector<SampledToken>& tokens = results.at(rank).tokens;
    do {
      merged.tokens.push_back(tokens.at(next[rank]++));
    } while (next[rank] < tokens.size() && tokens[next[rank]].sequence_id == chunk.sequence_id);
  }
  return merged;
}

void EngineCore::require_one_rank(const char* what) const {
  if (model_.size() != 1) fail("{} needs tensor parallel size 1 (this engine has {} ranks)", what, model_.size());
}

void EngineCore::validate(const GenerateRequest& request) const {
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < request.prompt_token_ids.size(); ++i) {
    const int32_t id = request.prompt_token_ids[i];
    if (id < 0 || id >= vocab) {
      fail_field("prompt_token_ids", "request: prompt token {} (position {}) outside the vocabulary of {}", id, i,
                 vocab);
    }
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

std::vector<PendingStep> EngineCore::launch(const StepPlan& plan) {
  std::vector<PendingStep> ranks(runners_.size());
  model_.run_on_ranks([&](int rank) { ranks[rank] = runners_[rank]->launch(plan); });
  return ranks;
}

std::vector<RequestOutput> EngineCore::step() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::vector<RequestOutput> outputs;
  const auto append = [&](std::vector<RequestOutput> more) {
    outputs.insert(outputs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  };
  double update_s = 0.0;
  const auto finish_timed = [&](const StepPlan& finished_plan, std::vector<PendingStep> ranks) {
    std::vector<Tensor> hidden_states;
    for (const PendingStep& rank : ranks) hidden_states.push_back(rank.hidden_states);
    std::vector<StepResult> results(runners_.size());
    model_.run_on_ranks([&](int rank) { results[rank] = runners_[rank]->finish(std::move(ranks[rank])); });
    const auto applying = Clock::now();
    append(scheduler_->update(finished_plan, merge_results(finished_plan, std::move(results))));
    update_s += std::chrono::duration<double>(Clock::now() - applying).count();
    if (proposer_ && proposer_->reads_hidden_states()) observe(finished_plan, hidden_states);
  };
  const auto apply_in_flight = [&] {
    if (!in_flight_) return;
    InFlightStep previous = std::move(*in_flight_);
    in_flight_.reset();
    finish_timed(previous.plan, std::move(previous.ranks));
  };
  // A proposer that needs every token to draft gets them: the pipeline drains first.
  if (proposer_ && !proposer_->drafts_past_token_in_flight()) apply_in_flight();
  const auto scheduling = Clock::now();
  DraftTokens drafts;
  if (proposer_) drafts = proposer_->propose(scheduler_->draft_requests(num_speculative_tokens_));
  StepPlan plan = scheduler_->schedule(drafts);
  if (proposer_) proposer_->forget(plan.finished_sequence_ids);
  const auto scheduled = Clock::now();
  // Launching before the step in flight is applied needs the step's input only on the device: every row sampled
  // there. The leader decides for all ranks (their samplers are alike). A step that samples on the host reads its
  // logits at launch, after the host applied the step in flight (its samplers need that step's tokens): the
  // pipeline drains first. An empty plan drains it too.
  const bool launch_ahead = overlap_schedule_ && !plan.chunks.empty() && leader().samples_on_device(plan);
  // A verify step is applied at once: until the host knows how many drafts it kept, no later step can be
  // scheduled for its sequences.
  const bool run_ahead =
      launch_ahead && std::none_of(plan.chunks.begin(), plan.chunks.end(),
                                   [](const ScheduledChunk& chunk) { return chunk.num_draft_tokens > 0; });
  if (!launch_ahead) apply_in_flight();
  std::vector<PendingStep> launched = launch(plan);
  apply_in_flight();
  if (run_ahead) {
    in_flight_ = InFlightStep{std::move(plan), std::move(launched)};
  } else {
    finish_timed(plan, std::move(launched));
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  const double schedule_s = std::chrono::duration<double>(scheduled - scheduling).count();
  const StepPlan& timed = run_ahead ? in_flight_->plan : plan;
  last_step_timing_ = {schedule_s, total_s - schedule_s - update_s, update_s, timed.num_tokens(),
                       static_cast<int32_t>(timed.chunks.size())};
  // Between steps with none in flight (a placement replaces expert weights the device may still be reading), on
  // all ranks at once; the step in flight is applied first and its outputs go out with these.
  if (eplb_interval_steps_ > 0 && ++steps_since_placement_ == eplb_interval_steps_) {
    apply_in_flight();
    model_.rebalance_experts();
    steps_since_placement_ = 0;
  }
  return outputs;
}

void EngineCore::observe(const StepPlan& plan, std::span<const Tensor> hidden_states) {
  std::vector<ComputedChunk> chunks;
  int32_t first_row = 0;
  for (const auto& chunk : plan.chunks) {
    const auto num_tokens = static_cast<int32_t>(chunk.token_ids.size());
    chunks.push_back({chunk.sequence_id, chunk.num_cached_tokens, num_tokens, first_row,
                      scheduler_->token_ids(chunk.sequence_id)});
    first_row += num_tokens;
  }
  if (!chunks.empty()) proposer_->observe(chunks, hidden_states);
}

void EngineCore::with_cached_prompt_blocks(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks,
                                           const std::function<void(std::span<const int32_t>)>& use) {
  require_one_rank("KV export (prefill/decode disaggregation)");
  const KvCache& cache = leader().kv_cache();
  if (cache.groups.size() != 1 || cache.groups[0].sliding_window_tokens != 0) {
    fail("KV export: needs a model whose layers all keep every block; this one's are {}", kv_layers_summary(cache.layers));
  }
  SequenceBlocks cached;
  kvs_.front()->match_prefix(cached, prompt);
  run_tier_copies();  // blocks of the prefix in the host tier come back first
  const int32_t num_cached = cached.num_blocks();
  const int32_t begin = std::clamp(first_block, 0, num_cached);
  const int32_t end = std::clamp(begin + std::max(max_blocks, 0), begin, num_cached);
  try {
    use(std::span<const int32_t>(cached.tables[0]).subspan(begin, end - begin));
  } catch (...) {
    kvs_.front()->free(cached);
    throw;
  }
  kvs_.front()->free(cached);
}

std::vector<uint8_t> EngineCore::export_prompt_kv(std::span<const int32_t> prompt, int32_t first_block,
                                                  int32_t max_blocks) {
  std::vector<uint8_t> bytes;
  with_cached_prompt_blocks(prompt, first_block, max_blocks,
                            [&](std::span<const int32_t> blocks) { bytes = leader().export_kv_blocks(blocks); });
  return bytes;
}

std::vector<uint8_t> EngineCore::export_prompt_kv_to(std::span<const int32_t> prompt, int32_t first_block,
                                                     int32_t max_blocks, void* payload) {
  std::vector<uint8_t> header;
  with_cached_prompt_blocks(prompt, first_block, max_blocks, [&](std::span<const int32_t> blocks) {
    leader().export_kv_blocks_to(blocks, payload);
    header = kv_export_header(leader().kv_cache(), static_cast<int32_t>(blocks.size()));
  });
  return header;
}

int32_t EngineCore::import_prompt_blocks(std::span<const int32_t> prompt, int32_t first_block, int32_t num_blocks,
                                         const std::function<void(std::span<const int32_t>, int32_t)>& fill) {
  const auto block_size = static_cast<int64_t>(kvs_.front()->block_size());
  const int64_t reusable = prompt.empty() ? 0 : static_cast<int64_t>(prompt.size() - 1) / block_size;
  if (first_block < 0 || first_block + num_blocks > reusable) {
    fail("KV import: blocks [{}, {}) of a prompt of {} tokens, which has {} reusable blocks of {}", first_block,
         first_block + num_blocks, prompt.size(), reusable, block_size);
  }
  const auto to_fill = kvs_.front()->import_prefix(prompt, first_block, num_blocks);
  run_tier_copies();  // blocks the import evicted go to the host tier before they are filled
  // to_fill is the blocks cached already (-1) followed by the new ones.
  const auto first_new = std::find_if(to_fill.begin(), to_fill.end(), [](int32_t b) { return b >= 0; });
  const std::vector<int32_t> fresh(first_new, to_fill.end());
  if (fresh.empty()) return 0;
  fill(fresh, static_cast<int32_t>(first_new - to_fill.begin()));
  return static_cast<int32_t>(fresh.size());
}

int32_t EngineCore::import_prompt_kv(std::span<const int32_t> prompt, int32_t first_block,
                                     std::span<const uint8_t> bytes) {
  require_one_rank("KV import (prefill/decode disaggregation)");
  // Checked before anything is inserted into the prefix cache: an unfilled cached block would be reused as garbage.
  check_kv_export_fits(leader().kv_cache(), bytes);
  return import_prompt_blocks(prompt, first_block, kv_blocks_in_export(bytes),
                              [&](std::span<const int32_t> fresh, int32_t skipped) {
                                leader().import_kv_blocks_from(
                                    fresh, {bytes.data() + kv_header_bytes(bytes), kv_blocks_in_export(bytes), skipped});
                              });
}

int32_t EngineCore::import_prompt_kv_from(std::span<const int32_t> prompt, int32_t first_block,
                                          std::span<const uint8_t> header, const void* payload) {
  require_one_rank("KV import (prefill/decode disaggregation)");
  check_kv_header_fits(leader().kv_cache(), header);
  return import_prompt_blocks(prompt, first_block, kv_blocks_in_export(header),
                              [&](std::span<const int32_t> fresh, int32_t skipped) {
                                leader().import_kv_blocks_from(fresh, {payload, kv_blocks_in_export(header), skipped});
                              });
}

size_t EngineCore::kv_payload_bytes(int32_t num_blocks) const {
  return tern::kv_payload_bytes(runners_.front()->kv_cache(), static_cast<size_t>(num_blocks));
}

std::unique_ptr<SharedBuffer> EngineCore::create_shared_buffer(size_t bytes) {
  require_one_rank("a shared KV buffer (prefill/decode disaggregation)");
  return model_.backend(0).create_shared_buffer(bytes);
}

std::unique_ptr<SharedBuffer> EngineCore::open_shared_buffer(std::span<const uint8_t> handle) {
  require_one_rank("a shared KV buffer (prefill/decode disaggregation)");
  return model_.backend(0).open_shared_buffer(handle);
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  // Data-parallel ranks' pools and prefix caches add up; usage and hit rate are KvCacheManager's over the sums.
  PrefixCacheStats prefix;
  for (const auto& kv : kvs_) {
    s.num_kv_blocks += kv->num_blocks();
    s.num_free_kv_blocks += kv->num_available_blocks();
    prefix.num_query_tokens += kv->prefix_stats().num_query_tokens;
    prefix.num_hit_tokens += kv->prefix_stats().num_hit_tokens;
  }
  s.kv_usage = 1.0 - static_cast<double>(s.num_free_kv_blocks) / s.num_kv_blocks;
  // A block is as many bytes on every rank; tensor-parallel ranks move their shares of each block together.
  const int64_t block_bytes = budget_.bytes_per_token * budget_.block_size * (model_.data_parallel() ? 1 : model_.size());
  for (const auto& kv : kvs_) {
    s.prefix_host_hit_tokens += kv->prefix_stats().num_host_hit_tokens;
    s.prefix_disk_hit_tokens += kv->prefix_stats().num_disk_hit_tokens;
    s.num_host_kv_blocks += kv->tier_stats().num_host_blocks;
    s.num_host_kv_blocks_cached += kv->tier_stats().num_host_blocks_cached;
    s.kv_bytes_to_host += kv->tier_stats().num_blocks_to_host * block_bytes;
    s.kv_bytes_to_device += kv->tier_stats().num_blocks_to_device * block_bytes;
  }
  if (s.num_host_kv_blocks > 0) {
    for (const auto& runner : runners_) s.kv_copy_seconds += runner->kv_copy_seconds();
  }
  s.kv_disk_tier = !disk_tiers_.empty();
  for (const auto& disk : disk_tiers_) {
    const KvDiskStoreStats d = disk->stats();
    s.kv_disk_blocks += d.num_blocks;
    s.kv_disk_bytes += d.num_bytes;
    s.kv_disk_read_bytes += d.num_read_bytes;
    s.kv_disk_write_bytes += d.num_write_bytes;
    s.kv_disk_read_seconds += d.read_seconds;
    s.kv_disk_write_seconds += d.write_seconds;
    s.kv_disk_corrupt_records += d.num_corrupt;
  }
  s.prefix_query_tokens = prefix.num_query_tokens;
  s.prefix_hit_tokens = prefix.num_hit_tokens;
  s.prefix_hit_rate = prefix.hit_rate();
  const auto& c = scheduler_->counters();
  s.num_preemptions = c.num_preemptions;
  s.num_computed_tokens = c.num_computed_tokens;
  s.num_generated_tokens = c.num_generated_tokens;
  s.num_finished_requests = c.num_finished_requests;
  s.num_steps = c.num_steps;
  s.num_speculative_tokens = num_speculative_tokens_;
  s.num_spec_drafts = c.num_spec_drafts;
  s.num_spec_draft_tokens = c.num_spec_draft_tokens;
  s.num_spec_accepted_tokens = c.num_spec_accepted_tokens;
  s.num_spec_accepted_tokens_per_pos = c.num_spec_accepted_tokens_per_pos;
  s.num_spec_accepted_tokens_per_pos.resize(static_cast<size_t>(num_speculative_tokens_), 0);
  return s;
}

}  // namespace tern
