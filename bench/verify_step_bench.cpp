// The model step of speculative decoding's verification against a plain decode step, at several batch sizes:
// a decode step computes one token per sequence, a verify step the sequence's last token and k drafts with a logit
// row per token. Both run through the engine's own ModelRunner (recorded decode steps included, with the scratch
// block past the pool as EngineCore sets it up), so the times are those of the steps the engine runs. The issue's
// target (speculative decoding): at Llama-3.1-8B shapes a verify step of k = 3 drafts costs at most 1.15x a decode
// step at batch 1-16. With --hidden-states both steps also return the model's hidden states, as the target's steps
// do for an MTP layer (deepseek_mtp). scripts/gpu/verify_step_check.sh runs it on the GPU machine.
//   verify_step_bench --model DIR [--backend cuda|cpu] [--batch-sizes 1,2,4,8,16] [--num-drafts 3] [--context 512]
//                     [--steps 100] [--warmup 10] [--hidden-states]
// One JSON object on stdout, a progress line per batch size on stderr. Bad flags exit 2, failures 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"
#include "engine/sharded_model.h"
#include "engine/step_plan.h"
#include "model/model.h"
#include "model/sequence_runner.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kUsageExitCode = 2;
constexpr int32_t kBlockSize = 16;  // the engine's default (EngineConfig::block_size)
constexpr int32_t kMaxPrefillTokens = 8192;
// ModelRunner records decode steps up to 512 sequences; larger batches would time eager steps.
constexpr int32_t kMaxBatchSize = 512;
// Each sequence's blocks hold its context and one step of a last token and up to kMaxDrafts drafts.
constexpr int32_t kMaxDrafts = 7;
constexpr int32_t kAcceptanceLengths[] = {2, 3, 4};

// Flags that do not fit the model (exit 2, as for flags CLI11 refuses).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string model_dir;
  std::string backend = "cuda";
  std::vector<int32_t> batch_sizes = {1, 2, 4, 8, 16};
  int32_t num_drafts = 3;
  int32_t context = 512;
  int32_t steps = 100;
  int32_t warmup = 10;
  bool hidden_states = false;
};

// Where the sequences' KV lives: sequence s owns, in KV cache group g, the blocks_per_table blocks starting at
// (s * num_groups + g) * blocks_per_table (own_block_tables: the groups share the storage of a block id).
struct BlockLayout {
  int64_t num_groups = 1;
  int64_t blocks_per_table = 0;

  int64_t num_blocks(int64_t num_seqs) const { return num_seqs * num_groups * blocks_per_table; }
  std::vector<std::vector<int32_t>> tables(int64_t seq_index) const {
    return own_block_tables(num_groups, blocks_per_table, seq_index * num_groups * blocks_per_table);
  }
};

// The sequences of one batch size, announced and prefilled with `context` random tokens each.
struct BenchBatch {
  std::vector<uint64_t> sequence_ids;
  std::vector<std::vector<std::vector<int32_t>>> block_tables;  // per sequence, per KV cache group
};

void run_step(ModelRunner& runner, const StepPlan& plan) { runner.finish(runner.launch(plan)); }

// Announces `batch_size` greedy sequences with ids from `first_id` and prefills each with `context` random tokens,
// in steps of at most kMaxPrefillTokens tokens with a sequence at most once per step (as the scheduler plans).
BenchBatch start_batch(ModelRunner& runner, const BlockLayout& layout, int32_t batch_size, uint64_t first_id,
                       int32_t context, int64_t vocab_size, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab_size - 1));
  BenchBatch batch;
  std::vector<std::vector<int32_t>> prompts;
  StepPlan plan;
  for (int32_t s = 0; s < batch_size; ++s) {
    batch.sequence_ids.push_back(first_id + static_cast<uint64_t>(s));
    batch.block_tables.push_back(layout.tables(s));
    auto& prompt = prompts.emplace_back(static_cast<size_t>(context));
    for (auto& id : prompt) id = token(rng);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    plan.new_sequences.push_back({batch.sequence_ids.back(), greedy, 0, {}});
  }
  std::vector<int32_t> num_done(static_cast<size_t>(batch_size), 0);
  for (int64_t num_left = int64_t{batch_size} * context; num_left > 0;) {
    int32_t budget = kMaxPrefillTokens;
    for (int32_t s = 0; s < batch_size && budget > 0; ++s) {
      if (num_done[s] == context) continue;
      const int32_t len = std::min(context - num_done[s], budget);
      ScheduledChunk chunk;
      chunk.sequence_id = batch.sequence_ids[s];
      chunk.num_cached_tokens = num_done[s];
      chunk.token_ids.assign(prompts[s].begin() + num_done[s], prompts[s].begin() + num_done[s] + len);
      chunk.block_tables = batch.block_tables[s];
      chunk.sample = num_done[s] + len == context;
      chunk.num_prompt_tokens = context;
      plan.chunks.push_back(std::move(chunk));
      num_done[s] += len;
      num_left -= len;
      budget -= len;
    }
    run_step(runner, plan);
    plan = StepPlan{};
  }
  return batch;
}

// A step that computes, for every sequence, its last token and `num_drafts` drafts after it at position `context`
// (a plain decode step when num_drafts is 0). Each timed step rewrites the same KV slots, which costs what writing
// new ones does.
StepPlan decode_plan(const BenchBatch& batch, int32_t context, int32_t num_drafts, int64_t vocab_size,
                     std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab_size - 1));
  StepPlan plan;
  for (size_t s = 0; s < batch.sequence_ids.size(); ++s) {
    ScheduledChunk chunk;
    chunk.sequence_id = batch.sequence_ids[s];
    chunk.num_cached_tokens = context;
    chunk.token_ids.resize(static_cast<size_t>(1 + num_drafts));
    for (auto& id : chunk.token_ids) id = token(rng);
    chunk.block_tables = batch.block_tables[s];
    chunk.sample = true;
    chunk.num_draft_tokens = num_drafts;
    chunk.num_prompt_tokens = context;
    plan.chunks.push_back(std::move(chunk));
  }
  return plan;
}

// The mean wall time of one step of `plan`, launched and finished, over `steps` steps after `warmup` untimed ones.
double mean_step_s(ModelRunner& runner, const StepPlan& plan, int32_t steps, int32_t warmup) {
  for (int32_t i = 0; i < warmup; ++i) run_step(runner, plan);
  const auto start = Clock::now();
  for (int32_t i = 0; i < steps; ++i) run_step(runner, plan);
  return std::chrono::duration<double>(Clock::now() - start).count() / steps;
}

nlohmann::json run_bench(const Options& options) {
  auto sharded = ShardedModel::load(options.model_dir, options.backend);
  Model& model = sharded->model(0);
  Backend& backend = sharded->backend(0);
  const int64_t vocab_size = model.config().vocab_size;
  const int64_t model_len = model.config().max_position_embeddings;
  if (model_len > 0 && options.context + 1 + options.num_drafts > model_len) {
    throw UsageError(fmt::format("--context {} with {} drafts passes the model's context of {} tokens",
                                 options.context, options.num_drafts, model_len));
  }
  const int32_t max_batch_size = *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end());

  BlockLayout layout;
  layout.num_groups = static_cast<int64_t>(kv_cache_groups(model.kv_layers()).size());
  layout.blocks_per_table = (options.context + 1 + kMaxDrafts + kBlockSize - 1) / kBlockSize;
  const auto num_blocks = static_cast<int32_t>(layout.num_blocks(max_batch_size));
  // As EngineCore on a device backend: one block past the pool pads recorded decode steps.
  ModelRunner runner(model, backend, backend.allocate_kv_cache(model.kv_layers(), num_blocks + 1, kBlockSize),
                     /*scratch_block=*/num_blocks, /*max_num_seqs=*/max_batch_size);
  if (options.hidden_states) runner.return_hidden_states();
  const int num_recorded = runner.record_steps(1 + options.num_drafts);

  std::mt19937 rng(0);
  nlohmann::json results = nlohmann::json::array();
  uint64_t next_sequence_id = 0;
  for (int32_t batch_size : options.batch_sizes) {
    const BenchBatch batch =
        start_batch(runner, layout, batch_size, next_sequence_id, options.context, vocab_size, rng);
    next_sequence_id += static_cast<uint64_t>(batch_size);
    const double plain_s = mean_step_s(runner, decode_plan(batch, options.context, 0, vocab_size, rng),
                                       options.steps, options.warmup);
    const double verify_s = mean_step_s(runner, decode_plan(batch, options.context, options.num_drafts, vocab_size, rng),
                                        options.steps, options.warmup);
    StepPlan finish;
    finish.finished_sequence_ids = batch.sequence_ids;
    run_step(runner, finish);

    // A verify step yields from 1 to num_drafts + 1 tokens per sequence: its throughput at the acceptance lengths
    // it can reach.
    nlohmann::json verify_tokens_per_s = nlohmann::json::object();
    for (int32_t length : kAcceptanceLengths) {
      if (length <= options.num_drafts + 1) verify_tokens_per_s[std::to_string(length)] = batch_size * length / verify_s;
    }
    results.push_back({
        {"batch_size", batch_size},
        {"plain_step_ms", plain_s * 1e3},
        {"verify_step_ms", verify_s * 1e3},
        {"ratio", verify_s / plain_s},
        {"plain_tokens_per_s", batch_size / plain_s},
        {"verify_tokens_per_s_at_acceptance_length", std::move(verify_tokens_per_s)},
    });
    std::fprintf(stderr, "verify_step_bench: batch %d: plain step %.3f ms, verify step (k = %d) %.3f ms, %.3fx\n",
                 batch_size, plain_s * 1e3, options.num_drafts, verify_s * 1e3, verify_s / plain_s);
  }
  return {
      {"benchmark", "verify_step"},
      {"model", options.model_dir},
      {"backend", backend.name()},
      {"device", backend.description()},
      {"num_drafts", options.num_drafts},
      {"context", options.context},
      {"steps", options.steps},
      {"warmup", options.warmup},
      {"block_size", kBlockSize},
      {"hidden_states", options.hidden_states},
      {"recorded_steps", num_recorded},
      {"results", std::move(results)},
  };
}

}  // namespace
}  // namespace tern

int main(int argc, char** argv) {
  CLI::App app{"verify_step_bench: the wall time of a speculative verify step (last token + k drafts per sequence) "
               "against a plain decode step, through the engine's ModelRunner"};
  tern::Options options;
  const auto at_least = [](int32_t min) { return CLI::Range(min, std::numeric_limits<int32_t>::max()); };
  app.add_option("--model", options.model_dir, "Hugging Face model directory")->required()->check(CLI::ExistingDirectory);
  app.add_option("--backend", options.backend, "cuda or cpu")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  app.add_option("--batch-sizes", options.batch_sizes, "Comma-separated batch sizes")
      ->delimiter(',')
      ->check(CLI::Range(1, tern::kMaxBatchSize))
      ->capture_default_str();
  app.add_option("--num-drafts", options.num_drafts, "Drafts per sequence in a verify step (k)")
      ->check(CLI::Range(1, tern::kMaxDrafts))
      ->capture_default_str();
  app.add_option("--context", options.context, "Tokens cached per sequence before the timed steps")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--steps", options.steps, "Timed steps of each kind")->check(at_least(1))->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed steps of each kind before them")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_flag("--hidden-states", options.hidden_states,
               "Both steps also return the model's hidden states (the target's steps under deepseek_mtp)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the error, or the help
    return rc == 0 ? 0 : tern::kUsageExitCode;
  }
  try {
    std::printf("%s\n", tern::run_bench(options).dump(2).c_str());
  } catch (const tern::UsageError& e) {
    std::fprintf(stderr, "verify_step_bench: error: %s\n", e.what());
    return tern::kUsageExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "verify_step_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
