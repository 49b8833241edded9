#include "cli/engine_options.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "cli/load_progress_display.h"
#include "cli/validators.h"
#include "core/error.h"
#include "kvcache/kv_cache_budget.h"
#include "model/hub_cache.h"

namespace tern::cli {

void ModelFlags::add_to(CLI::App& cmd, bool model_required) {
  CLI::Option* option = cmd.add_option(
      "--model", model,
      "Hugging Face model directory, or a model id (ORG/NAME or ORG/NAME@REVISION) in the local Hugging Face cache "
      "($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub)");
  if (model_required) option->required();
  cmd.add_option("--backend", backend,
                 "auto (cuda where this build has CUDA and a GPU is present, else cpu), cpu or cuda; the CPU kernels' "
                 "instruction set is forced with TERN_CPU_ISA=avx2 or avx512")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--threads", threads, "CPU backend threads (0: all cores)")->check(non_negative());
  cmd.add_option("--quantization", quantization,
                 "none, or fp8: quantize the linear layers' and experts' bf16/f16/f32 weights to block FP8 at load "
                 "(128x128 blocks with float32 scales, the layout of DeepSeek's FP8 checkpoints; vLLM's online FP8). "
                 "A block-FP8 checkpoint loads as it is, but for DeepSeek-V4's FP4 experts, repacked as block FP8 (twice their "
                 "bytes; the FP8 expert kernels); other quantized checkpoints are refused")
      ->check(CLI::IsMember({"none", "fp8"}))
      ->capture_default_str();
}

std::filesystem::path ModelFlags::model_dir() const { return resolve_model_path(model); }

OnlineQuantization ModelFlags::online_quantization() const {
  return parse_online_quantization(quantization, "--quantization");
}

std::unique_ptr<ShardedModel> ModelFlags::load(const ParallelConfig& parallel) const {
  return ShardedModel::load(model_dir(), backend, parallel, threads, load_progress_display(), online_quantization());
}

void EngineFlags::add_to(CLI::App& cmd) {
  add_parallel_options(cmd, parallel);
  add_eplb_interval_option(cmd, eplb_interval_steps);
  cmd.add_option("--kv-cache-memory", kv_cache_memory, "KV cache size, e.g. 2GiB or 512MiB (default: see below)");
  cmd.add_option("--gpu-memory-utilization,--kv-cache-fraction", kv_cache_fraction,
                 "Share of the device's memory the weights, the largest step's activations and the KV cache may "
                 "take (on the CPU: the KV cache's share of the host's available memory); the KV cache holds no "
                 "more than --max-num-seqs sequences of --max-model-len tokens")
      ->check(between(0.0, 1.0))->capture_default_str();
  cmd.add_option("--num-kv-blocks", num_kv_blocks, "KV cache size in blocks (overrides the memory flags)")
      ->check(non_negative());
  cmd.add_option("--block-size", block_size, "Tokens per KV block")->check(positive())->capture_default_str();
  add_kv_cache_dtype_option(cmd, kv_cache_dtype);
  cmd.add_option("--max-num-batched-tokens", max_num_batched_tokens, "Token budget of one step")
      ->check(positive())->capture_default_str();
  cmd.add_option("--max-num-seqs", max_num_seqs, "Most sequences running at once")
      ->check(positive())->capture_default_str();
  cmd.add_option("--max-model-len", max_model_len,
                 "Tokens per sequence, prompt included (0: the model's context, lowered to what the KV cache holds)")
      ->check(non_negative());
  cmd.add_flag("--no-prefix-cache", no_prefix_cache, "Do not reuse cached prompt prefixes");
  cmd.add_flag("--no-chunked-prefill", no_chunked_prefill, "Admit a prompt only when all of it fits one step");
  cmd.add_option("--scheduling-policy", policy, "fcfs or priority")->check(CLI::IsMember({"fcfs", "priority"}));
  cmd.add_option("--overlap-schedule", overlap_schedule,
                 "on (the default): schedule and launch each step before reading the previous step's tokens (the "
                 "host's work hides behind the device's); off: one step at a time")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd.add_option("--speculative-config", speculative_config,
                 "Speculative decoding, as vLLM's JSON object: '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                 "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}' (prompt lookup), '{\"model\": DIR, "
                 "\"num_speculative_tokens\": 4}' (a draft model sharing the tokenizer), '{\"method\": "
                 "\"deepseek_mtp\", \"num_speculative_tokens\": 1}' (the multi-token prediction layer of DeepSeek-V3 and V4 checkpoints) "
                 "or '{\"method\": \"eagle3\", \"model\": DIR, \"num_speculative_tokens\": 3}' (an EAGLE-3 head), "
                 "with \"quantization\": \"fp8\" to quantize the drafter as it loads; "
                 "greedy outputs are unchanged, sampled ones keep their distribution. With --overlap-schedule on, verify "
                 "steps are applied at once, and only prompt lookup drafts while a step is in flight");
  cmd.add_option("--host-kv-cache-memory", host_kv_cache_memory,
                 "Host-memory tier under the KV cache, e.g. 32GiB (pinned on GPUs; default: none): prefix-cache "
                 "blocks the device evicts go there, and a later prompt sharing them loads them back instead of "
                 "recomputing (SGLang's HiCache)");
  cmd.add_option("--kv-write-policy", kv_write_policy,
                 "write_back: copy a block to the host tier when the device evicts it; write_through: as soon as it "
                 "is cached")
      ->check(CLI::IsMember({"write_back", "write_through"}))->capture_default_str();
  cmd.add_option("--kv-cache-dir", kv_cache_dir,
                 "Disk tier under the host tier: blocks evicted from host memory are written to files here, and a "
                 "restarted server of the same model finds them (default: none)");
  cmd.add_option("--kv-cache-dir-size", kv_cache_dir_size,
                 "Most bytes the disk tier's files take (per rank); the oldest go first")
      ->capture_default_str();
}

EngineConfig EngineFlags::to_config(const std::filesystem::path& model_dir) const {
  EngineConfig config;
  config.block_size = block_size;
  config.kv_cache_dtype = parse_kv_cache_dtype(kv_cache_dtype);
  config.num_kv_blocks = num_kv_blocks;
  if (!kv_cache_memory.empty()) {
    config.kv_cache_memory_bytes = parse_byte_size(kv_cache_memory, "--kv-cache-memory");
    if (config.kv_cache_memory_bytes <= 0) fail("--kv-cache-memory: '{}' must be more than 0 bytes", kv_cache_memory);
  }
  if (!(kv_cache_fraction > 0.0)) fail("--gpu-memory-utilization {}: must be more than 0", kv_cache_fraction);
  config.kv_cache_memory_fraction = kv_cache_fraction;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_num_seqs = max_num_seqs;
  config.max_model_len = max_model_len;
  config.enable_prefix_cache = !no_prefix_cache;
  config.enable_chunked_prefill = !no_chunked_prefill;
  config.policy = policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  config.eplb_interval_steps = eplb_interval_or_default(eplb_interval_steps, parallel.num_redundant_experts);
  config.overlap_schedule = overlap_schedule == "on";
  if (!speculative_config.empty()) {
    config.speculative = parse_speculative_config(speculative_config);
    // vLLM's MTP reads the next-n layer from the target's own checkpoint unless "model" names another.
    if (config.speculative->method == SpeculativeMethod::kDeepseekMtp && config.speculative->draft_model_dir.empty()) {
      config.speculative->draft_model_dir = model_dir;
    }
  }
  if (!host_kv_cache_memory.empty()) {
    config.host_kv_cache_bytes = parse_byte_size(host_kv_cache_memory, "--host-kv-cache-memory");
    if (config.host_kv_cache_bytes <= 0) {
      fail("--host-kv-cache-memory: '{}' must be more than 0 bytes", host_kv_cache_memory);
    }
  }
  config.kv_write_through = kv_write_policy == "write_through";
  config.kv_cache_dir = kv_cache_dir;
  config.kv_cache_dir_bytes = parse_byte_size(kv_cache_dir_size, "--kv-cache-dir-size");
  if (config.kv_cache_dir_bytes <= 0) fail("--kv-cache-dir-size: '{}' must be more than 0 bytes", kv_cache_dir_size);
  if (!kv_cache_dir.empty()) config.model_identity = model_identity(model_dir);
  return config;
}

std::string model_identity(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path canonical = fs::weakly_canonical(dir, error);
  std::string identity = "model " + (error ? dir : canonical).string();
  std::ifstream config(dir / "config.json", std::ios::binary);
  identity += "\nconfig " + std::string(std::istreambuf_iterator<char>(config), {});
  std::vector<fs::path> weights;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".safetensors") weights.push_back(entry.path());
  }
  std::sort(weights.begin(), weights.end());
  for (const auto& file : weights) {
    const auto modified = fs::last_write_time(file, error).time_since_epoch().count();
    identity += fmt::format("\nweights {} {} {}", file.filename().string(), fs::file_size(file, error), modified);
  }
  return identity;
}

void add_parallel_options(CLI::App& cmd, ParallelConfig& parallel) {
  cmd.add_option("--tensor-parallel-size,--tp", parallel.tensor_parallel_size,
                 "GPUs (or CPU ranks) the model is split over, one thread each, meeting through NCCL on GPUs")
      ->check(positive());
  cmd.add_option("--expert-parallel-size,--ep", parallel.expert_parallel_size,
                 "1, or the number of ranks: MoE experts split over the ranks instead of replicated on each")
      ->check(positive());
  cmd.add_option("--num-redundant-experts", parallel.num_redundant_experts,
                 "Extra expert slots per MoE layer, holding replicas of the busiest experts (with --ep; the experts "
                 "plus these must split evenly over the ranks)")
      ->check(non_negative());
  cmd.add_option("--decode-context-parallel-size,--dcp", parallel.decode_context_parallel_size,
                 "1, or the tensor-parallel size: each rank caches every N-th token of each sequence (N times the "
                 "context per rank's memory) and runs attention whole, merging the ranks' partial results")
      ->check(positive());
  cmd.add_option("--data-parallel-size,--dp", parallel.data_parallel_size,
                 "Ranks (GPUs, or CPU threads) with data-parallel attention: each runs its own requests with its own "
                 "KV cache, and the MoE layers send tokens to their experts' ranks (needs --ep equal to it and --tp 1)")
      ->check(positive());
}

void add_kv_cache_dtype_option(CLI::App& cmd, std::string& kv_cache_dtype) {
  cmd.add_option("--kv-cache-dtype", kv_cache_dtype,
                 "What the KV cache stores: auto (the backend's activation type: float32 on the CPU, bf16 on GPUs), "
                 "fp8 or fp8_e4m3 (e4m3 codes with per-layer key and value scales, 1 unless the checkpoint has "
                 "them: half of bf16's bytes per token; on CUDA for dense and sliding-window attention, not yet MLA or "
                 "DeepSeek-V4 caches)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}))->capture_default_str();
}

void add_eplb_interval_option(CLI::App& cmd, std::optional<int64_t>& eplb_interval_steps) {
  cmd.add_option("--eplb-interval", eplb_interval_steps,
                 "Engine steps between expert placements by measured load (0: never; default 1000 with redundant "
                 "experts, else 0)")
      ->check(non_negative());
}

int64_t eplb_interval_or_default(const std::optional<int64_t>& eplb_interval_steps, int64_t num_redundant_experts) {
  constexpr int64_t kDefaultEplbIntervalSteps = 1000;
  return eplb_interval_steps.value_or(num_redundant_experts > 0 ? kDefaultEplbIntervalSteps : 0);
}

void SamplingFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--temperature", temperature, "Sampling temperature (0: greedy)")->check(non_negative());
  cmd.add_option("--top-k", top_k, "Keep the k most likely tokens (0: all)")->check(non_negative());
  cmd.add_option("--top-p", top_p, "Nucleus sampling probability mass")->check(between(0.0, 1.0));
  cmd.add_option("--min-p", min_p, "Drop tokens below min_p times the most likely")->check(between(0.0, 1.0));
  cmd.add_option("--repetition-penalty", repetition_penalty, "Penalty on prompt and output tokens (1: none)");
  cmd.add_option("--frequency-penalty", frequency_penalty, "Penalty per occurrence in the output");
  cmd.add_option("--presence-penalty", presence_penalty, "Penalty for appearing in the output");
  cmd.add_option("--seed", seed, "Per-request random seed");
  cmd.add_flag("--ignore-eos", ignore_eos, "Keep generating past the model's EOS token");
}

SamplingParams SamplingFlags::to_params() const {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  params.repetition_penalty = repetition_penalty;
  params.frequency_penalty = frequency_penalty;
  params.presence_penalty = presence_penalty;
  params.seed = seed;
  return params;
}

}  // namespace tern::cli
