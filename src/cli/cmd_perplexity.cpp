// `tern perplexity`: how well the model predicts a text (llama.cpp's llama-perplexity), to measure what a
// quantization or a backend change costs. The windows and the statistics are perplexity.h's.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/perplexity.h"
#include "core/error.h"
#include "engine/sharded_model.h"
#include "model/layers/sparse_moe.h"
#include "model/model_config.h"
#include "model/sequence_runner.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {
namespace {

constexpr int64_t kDefaultContextTokens = 512;  // llama-perplexity's default -c

struct PerplexityOptions {
  ModelFlags model;
  ParallelConfig parallel;
  std::string text_path;
  std::optional<int64_t> context_len;  // unset: kDefaultContextTokens, capped by the model's positions
  std::optional<int64_t> stride;       // unset: half the window
  std::optional<int64_t> max_windows;  // unset: the whole text
  std::string kv_cache_dtype = "auto";
  bool json = false;
};

// Bad input is a usage error: exit code 2 after the reason. (CLI11::RuntimeError carries the code and prints
// nothing itself.)
template <typename... Args>
[[noreturn]] void refuse(fmt::format_string<Args...> format, Args&&... args) {
  std::fprintf(stderr, "tern: error: perplexity: %s\n", fmt::format(format, std::forward<Args>(args)...).c_str());
  throw CLI::RuntimeError(2);
}

std::string read_text(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) refuse("--text {}: a directory, not a text file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse("--text {}: cannot open it ({})", path, std::strerror(errno));
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) refuse("--text {}: reading failed", path);
  if (text.empty()) refuse("--text {}: the file is empty", path);
  return text;
}

// The negative log-likelihood of `target` under one position's logits: logsumexp(logits) - logits[target].
double token_nll(const float* logits, int64_t vocab_size, int32_t target) {
  float max_logit = logits[0];
  for (int64_t v = 1; v < vocab_size; ++v) max_logit = std::max(max_logit, logits[v]);
  double sum_exp = 0.0;
  for (int64_t v = 0; v < vocab_size; ++v) sum_exp += std::exp(static_cast<double>(logits[v] - max_logit));
  return std::log(sum_exp) + max_logit - logits[target];
}

// The logits [tokens, vocab] of every position of `tokens`, read in one pass from an empty cache of `kv_dtype`.
std::vector<float> all_logits(ShardedModel& model, const std::vector<int32_t>& tokens, KvCacheDtype kv_dtype) {
  std::vector<float> values;
  model.run_on_ranks([&](int rank) {
    if (model.data_parallel() && rank != 0) {
      // Data-parallel attention: the window runs on rank 0; the others compute their experts for its tokens.
      serve_expert_peers(model.model(rank), model.backend(rank));
      return;
    }
    SequenceRunner runner(model.model(rank), model.backend(rank), static_cast<int64_t>(tokens.size()), 16, kv_dtype);
    const Tensor logits = runner.append(tokens, true);
    if (rank == 0) values = model.backend(rank).to_host_f32(logits);  // every tensor-parallel rank holds them all
  });
  return values;
}

void run_perplexity(const PerplexityOptions& options) {
  if (options.context_len && *options.context_len < 2) {
    refuse("--context-length {}: a window needs at least 2 tokens (one to predict from, one to score)",
           *options.context_len);
  }
  if (options.stride && *options.stride < 1) refuse("--stride {}: must be at least 1", *options.stride);
  if (options.max_windows && *options.max_windows < 1) {
    refuse("--max-chunks {}: must be at least 1", *options.max_windows);
  }
  const std::string text = read_text(options.text_path);
  const auto model_dir = options.model.model_dir();
  const int64_t max_positions = ModelConfig::load(model_dir).max_position_embeddings;
  const int64_t context_len = options.context_len.value_or(std::min(kDefaultContextTokens, max_positions));
  if (context_len > max_positions) {
    refuse("--context-length {}: above the model's limit of {} positions", context_len, max_positions);
  }
  const int64_t stride = options.stride.value_or(std::max<int64_t>(context_len / 2, 1));
  if (stride > context_len) refuse("--stride {}: above --context-length {}", stride, context_len);

  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  std::vector<int32_t> text_tokens;
  try {
    text_tokens = tokenizer.encode(text, /*add_special_tokens=*/false);
  } catch (const Error& e) {
    refuse("--text {}: {}", options.text_path, e.what());
  }
  const std::vector<int32_t>& prefix = tokenizer.special_prefix_ids();
  const auto num_prefix = static_cast<int64_t>(prefix.size());
  const auto num_text = static_cast<int64_t>(text_tokens.size());
  if (num_prefix + num_text < 2) {
    refuse("--text {}: {} token(s), and scoring needs at least 2", options.text_path, num_prefix + num_text);
  }
  const int64_t max_scored = max_scored_tokens_per_window(num_prefix, context_len);
  if (max_scored < 1) {
    refuse("--context-length {}: leaves no room after the tokenizer's {} prefix token(s)", context_len, num_prefix);
  }
  if (stride > max_scored) {
    // Hugging Face's loop would accept it and skip a token per window; every token is scored here instead.
    refuse("--stride {}: a window of {} tokens scores at most {} new ones (its first position is only context), "
           "so a larger stride would skip tokens",
           stride, context_len, max_scored);
  }

  auto windows = plan_perplexity_windows(num_text, num_prefix, context_len, stride);
  if (options.max_windows && static_cast<int64_t>(windows.size()) > *options.max_windows) {
    windows.resize(static_cast<size_t>(*options.max_windows));
  }
  auto model = options.model.load(options.parallel);
  const int64_t vocab_size = model->config().vocab_size;
  std::fprintf(stderr, "perplexity: %lld text tokens, %zu window%s of %lld tokens, stride %lld\n",
               static_cast<long long>(num_text), windows.size(), windows.size() == 1 ? "" : "s",
               static_cast<long long>(context_len), static_cast<long long>(stride));
  NllAccumulator nll;
  const KvCacheDtype kv_dtype = parse_kv_cache_dtype(options.kv_cache_dtype);
  for (size_t w = 0; w < windows.size(); ++w) {
    const PerplexityWindow& window = windows[w];
    std::vector<int32_t> tokens = prefix;
    tokens.insert(tokens.end(), text_tokens.begin() + window.text_begin, text_tokens.begin() + window.text_end);
    const std::vector<float> logits = all_logits(*model, tokens, kv_dtype);
    for (int64_t t = window.scored_begin; t < window.text_end; ++t) {
      const int64_t predicting_position = num_prefix + (t - window.text_begin) - 1;
      nll.add(token_nll(logits.data() + predicting_position * vocab_size, vocab_size, text_tokens[t]));
    }
    std::fprintf(stderr, "[%zu]%.4f,", w + 1, nll.perplexity());
    std::fflush(stderr);
  }
  std::fprintf(stderr, "\n");

  if (options.json) {
    const nlohmann::json report = {{"perplexity", nll.perplexity()},   {"std_error", nll.std_error()},
                                   {"tokens_scored", nll.count()},     {"windows", windows.size()},
                                   {"context_length", context_len},    {"stride", stride},
                                   {"nll_mean", nll.mean()}};
    std::printf("%s\n", report.dump().c_str());
  } else {
    std::printf("PPL = %.4f +/- %.5f over %lld tokens (%zu windows of %lld tokens, stride %lld)\n", nll.perplexity(),
                nll.std_error(), static_cast<long long>(nll.count()), windows.size(),
                static_cast<long long>(context_len), static_cast<long long>(stride));
  }
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto options = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of the model on a text file (llama.cpp's llama-perplexity), with sliding windows");
  options->model.add_to(*cmd);
  cmd->add_option("--text", options->text_path, "Text file, tokenized whole with the model's tokenizer")->required();
  cmd->add_option("--context-length,-c", options->context_len,
                  "Tokens per window, the tokenizer's BOS included (default: 512, or the model's limit if lower)");
  cmd->add_option("--stride", options->stride,
                  "Tokens each window advances; it scores only the tokens no earlier window scored (default: half "
                  "the window; at most the window less its first position)");
  cmd->add_option("--max-chunks", options->max_windows, "Score only the first K windows (default: all)");
  add_kv_cache_dtype_option(*cmd, options->kv_cache_dtype);
  cmd->add_flag("--json", options->json,
                "Print {perplexity, std_error, tokens_scored, windows, context_length, stride, nll_mean} as JSON");
  add_parallel_options(*cmd, options->parallel);
  cmd->callback([options] { run_perplexity(*options); });
}

}  // namespace tern::cli
