#pragma once
// The engine and sampling flags shared by the commands that run the engine (generate, bench, serve).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine_config.h"
#include "engine/sharded_model.h"
#include "engine/sampling_params.h"

namespace tern::cli {

// --model, --backend, --threads and --quantization, for every command that loads a model.
struct ModelFlags {
  std::string model;  // a directory or a Hugging Face id (hub_cache.h)
  std::string backend = "auto";
  int threads = 0;
  std::string quantization = "none";

  void add_to(CLI::App& cmd, bool model_required = true);
  // The model's directory: --model itself, or the hub cache's snapshot of the id.
  std::filesystem::path model_dir() const;
  OnlineQuantization online_quantization() const;
  // Loads the model with a progress display on stderr.
  std::unique_ptr<ShardedModel> load(const ParallelConfig& parallel) const;
};

// The engine flags of every command that runs the engine (generate, chat, bench, serve), so that each sizes its
// KV cache the same way: --kv-cache-memory or --num-kv-blocks where given, else a fraction of the backend's memory
// (EngineConfig's default, vLLM's --gpu-memory-utilization).
struct EngineFlags {
  ParallelConfig parallel;  // not EngineConfig fields: they decide how the model is loaded
  std::optional<int64_t> eplb_interval_steps;  // unset: eplb_interval_or_default
  std::string kv_cache_memory;  // e.g. "2GiB"; empty: kv_cache_fraction
  double kv_cache_fraction = EngineConfig{}.kv_cache_memory_fraction;
  int32_t num_kv_blocks = 0;
  int32_t block_size = 16;
  std::string kv_cache_dtype = "auto";
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  int64_t max_model_len = 0;
  bool no_prefix_cache = false;
  bool no_chunked_prefill = false;
  std::string policy = "fcfs";
  std::string overlap_schedule = "on";
  std::string speculative_config;  // vLLM's JSON object; empty: no speculative decoding
  std::string host_kv_cache_memory;  // e.g. "32GiB"; empty: no host tier
  std::string kv_write_policy = "write_back";
  std::string kv_cache_dir;
  std::string kv_cache_dir_size = "64GiB";

  void add_to(CLI::App& cmd);
  // The config for the model in `model_dir` (which names the disk tier's files).
  EngineConfig to_config(const std::filesystem::path& model_dir) const;
};

// What a KV cache computed from the model in `dir` is for (EngineConfig::model_identity): its canonical path and
// config, and each weight file's name, size and modification time, so that replacing the weights changes it.
std::string model_identity(const std::filesystem::path& dir);

// How the model is spread over ranks (ShardedModel::load), shared by the commands that load a model:
// --tensor-parallel-size, --expert-parallel-size, --num-redundant-experts, --decode-context-parallel-size and
// --data-parallel-size.
void add_parallel_options(CLI::App& cmd, ParallelConfig& parallel);
// --eplb-interval, for the commands that run the engine.
void add_eplb_interval_option(CLI::App& cmd, std::optional<int64_t>& eplb_interval_steps);
// The --eplb-interval given, else rebalancing every 1000 steps when there are redundant experts to place (the slots
// pay only when placed by load) and never otherwise.
int64_t eplb_interval_or_default(const std::optional<int64_t>& eplb_interval_steps, int64_t num_redundant_experts);
// --kv-cache-dtype (vLLM's): the names parse_kv_cache_dtype takes, for the engine commands and perplexity.
void add_kv_cache_dtype_option(CLI::App& cmd, std::string& kv_cache_dtype);

struct SamplingFlags {
  float temperature = 0.0f;  // greedy unless asked otherwise
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;

  void add_to(CLI::App& cmd);
  SamplingParams to_params() const;
};

}  // namespace tern::cli
