// `tern perplexity` run as its users run it, against a perplexity computed here from the model library's logits:
// the log-softmax of every position, each text token scored in the first window that holds it with a position
// before it (window k reads the tokenizer's prefix, then text from token k * stride); and the errors of bad input.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "fixtures.h"
#include "model/model.h"
#include "model/sequence_runner.h"
#include "run_command.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

const fs::path kPythonModel = testing::fixtures_dir() / "models" / "tern-py-13m";  // its tokenizer adds a BOS
const fs::path kNoBosModel = testing::fixtures_dir() / "models" / "qwen3-chat-tiny";

const std::string kText =
    "def fibonacci(n):\n"
    "    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n"
    "\n"
    "\n"
    "if __name__ == \"__main__\":\n"
    "    print(fibonacci(10))\n";

testing::CommandResult tern(std::vector<std::string> args) {
  args.insert(args.begin(), testing::tern_binary().string());
  return testing::run_command(args);
}

fs::path write_temp_file(const std::string& name, const std::string& contents) {
  const fs::path path = fs::temp_directory_path() / ("tern_perplexity_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

struct Reference {
  std::vector<double> nlls;  // of the scored tokens, in text order
  int64_t num_windows = 0;
  double perplexity() const {
    double sum = 0;
    for (double nll : nlls) sum += nll;
    return std::exp(sum / static_cast<double>(nlls.size()));
  }
};

// The NLLs `tern perplexity --context-length context_len --stride stride` should report for `text` on `dir`.
Reference reference_nlls(const fs::path& dir, const std::string& text, int64_t context_len, int64_t stride,
                         int64_t max_windows = 1 << 30) {
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::vector<int32_t> prefix = tokenizer.special_prefix_ids();
  const std::vector<int32_t> ids = tokenizer.encode(text, false);
  const auto num_prefix = static_cast<int64_t>(prefix.size());
  const auto num_text = static_cast<int64_t>(ids.size());
  const int64_t text_per_window = context_len - num_prefix;
  auto backend = make_cpu_backend(1);
  auto model = load_model(dir, *backend);
  std::map<int64_t, std::vector<float>> window_logits;  // by window index: [positions, vocab]
  const int64_t vocab_size = model->config().vocab_size;
  Reference reference;
  for (int64_t t = 0; t < num_text; ++t) {
    if (num_prefix == 0 && t == 0) continue;  // nothing before it predicts it
    int64_t k = 0;
    while (k * stride + text_per_window <= t) ++k;  // the first window that reaches token t
    if (k * stride > t || (num_prefix == 0 && k * stride == t)) {
      ADD_FAILURE() << "no window gives text token " << t << " a position before it";
      continue;
    }
    if (k >= max_windows) break;
    reference.num_windows = std::max(reference.num_windows, k + 1);
    const int64_t begin = k * stride;
    auto& logits = window_logits[k];
    if (logits.empty()) {
      std::vector<int32_t> tokens = prefix;
      const int64_t end = std::min(begin + text_per_window, num_text);
      tokens.insert(tokens.end(), ids.begin() + begin, ids.begin() + end);
      SequenceRunner runner(*model, *backend, static_cast<int64_t>(tokens.size()));
      logits = backend->to_host_f32(runner.append(tokens, true));
    }
    const float* row = logits.data() + (num_prefix + t - begin - 1) * vocab_size;
    double max_logit = row[0];
    for (int64_t v = 0; v < vocab_size; ++v) max_logit = std::max<double>(max_logit, row[v]);
    double sum_exp = 0;
    for (int64_t v = 0; v < vocab_size; ++v) sum_exp += std::exp(row[v] - max_logit);
    const double log_softmax = row[ids[static_cast<size_t>(t)]] - max_logit - std::log(sum_exp);
    reference.nlls.push_back(-log_softmax);
  }
  return reference;
}

nlohmann::json perplexity_json(const fs::path& model, const fs::path& text, std::vector<std::string> flags) {
  std::vector<std::string> args = {"perplexity", "--model", model.string(), "--text", text.string(), "--threads", "1",
                                   "--json"};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto result = tern(args);
  EXPECT_EQ(result.exit_code, 0);
  return nlohmann::json::parse(result.output);
}

void expect_matches(const nlohmann::json& report, const Reference& reference) {
  const double n = static_cast<double>(reference.nlls.size());
  double mean = 0, mean_squares = 0;
  for (double nll : reference.nlls) {
    mean += nll / n;
    mean_squares += nll * nll / n;
  }
  const double std_error = reference.perplexity() * std::sqrt((mean_squares - mean * mean) / (n - 1));
  EXPECT_EQ(report["tokens_scored"].get<int64_t>(), static_cast<int64_t>(reference.nlls.size()));
  EXPECT_EQ(report["windows"].get<int64_t>(), reference.num_windows);
  EXPECT_NEAR(report["nll_mean"].get<double>(), mean, 1e-6 * mean);
  EXPECT_NEAR(report["perplexity"].get<double>(), reference.perplexity(), 1e-6 * reference.perplexity());
  EXPECT_NEAR(report["std_error"].get<double>(), std_error, 1e-5 * std_error);
}

class PerplexityCommand : public ::testing::Test {
 protected:
  void SetUp() override { text_ = write_temp_file("text.py", kText); }
  void TearDown() override { fs::remove(text_); }
  int64_t num_text_tokens(const fs::path& model) const {
    return static_cast<int64_t>(Tokenizer::load(model).encode(kText, false).size());
  }
  fs::path text_;
};

TEST_F(PerplexityCommand, OneWindowIsTheMeanNllOfEveryTokenAfterTheBos) {
  const int64_t num_text = num_text_tokens(kPythonModel);
  ASSERT_LT(num_text + 1, 128);
  const auto report = perplexity_json(kPythonModel, text_, {"--context-length", "128"});
  // One pass over BOS + text: position i's logits score token i + 1.
  const Reference reference = reference_nlls(kPythonModel, kText, 128, 64);
  ASSERT_EQ(reference.num_windows, 1);
  EXPECT_EQ(report["tokens_scored"].get<int64_t>(), num_text);
  EXPECT_EQ(report["context_length"].get<int64_t>(), 128);
  EXPECT_EQ(report["stride"].get<int64_t>(), 64);  // half the window
  expect_matches(report, reference);
  // A real model on Python: far better than chance over its 32,000 tokens.
  EXPECT_LT(report["perplexity"].get<double>(), 100.0);
}

TEST_F(PerplexityCommand, OverlappingWindowsScoreEachTokenOnceWithTheContextOfItsWindow) {
  const int64_t num_text = num_text_tokens(kPythonModel);
  for (const auto& [context_len, stride] : std::vector<std::pair<int64_t, int64_t>>{{16, 8}, {24, 5}, {12, 11}}) {
    const auto report = perplexity_json(kPythonModel, text_, {"--context-length", std::to_string(context_len),
                                                              "--stride", std::to_string(stride)});
    const Reference reference = reference_nlls(kPythonModel, kText, context_len, stride);
    EXPECT_EQ(report["tokens_scored"].get<int64_t>(), num_text) << context_len << "/" << stride;
    EXPECT_GT(reference.num_windows, 2);
    expect_matches(report, reference);
  }
}

TEST_F(PerplexityCommand, OverlappingWindowsCostContext) {
  // Short windows see less of the text before each token: the same text scores worse than in one window.
  const auto whole = perplexity_json(kPythonModel, text_, {"--context-length", "128"});
  const auto short_windows = perplexity_json(kPythonModel, text_, {"--context-length", "8", "--stride", "7"});
  EXPECT_GT(short_windows["perplexity"].get<double>(), whole["perplexity"].get<double>());
}

TEST_F(PerplexityCommand, MaxChunksStopsAfterThatManyWindows) {
  const auto report = perplexity_json(kPythonModel, text_, {"-c", "16", "--stride", "8", "--max-chunks", "2"});
  EXPECT_EQ(report["windows"].get<int64_t>(), 2);
  EXPECT_EQ(report["tokens_scored"].get<int64_t>(), 15 + 8);  // the first window's 15 text tokens, then 8
  expect_matches(report, reference_nlls(kPythonModel, kText, 16, 8, 2));
}

TEST_F(PerplexityCommand, WithoutABosTheFirstTokenIsOnlyContext) {
  const int64_t num_text = num_text_tokens(kNoBosModel);
  ASSERT_TRUE(Tokenizer::load(kNoBosModel).special_prefix_ids().empty());
  const auto report = perplexity_json(kNoBosModel, text_, {"--context-length", "8", "--stride", "3"});
  EXPECT_EQ(report["tokens_scored"].get<int64_t>(), num_text - 1);
  expect_matches(report, reference_nlls(kNoBosModel, kText, 8, 3));
}

TEST_F(PerplexityCommand, DefaultsAreAWindowOf512AdvancingByHalf) {
  const auto report = perplexity_json(kPythonModel, text_, {});
  EXPECT_EQ(report["context_length"].get<int64_t>(), 512);
  EXPECT_EQ(report["stride"].get<int64_t>(), 256);
  EXPECT_EQ(report["windows"].get<int64_t>(), 1);
}

TEST_F(PerplexityCommand, PrintsThePerplexityWithItsErrorAndTokenCount) {
  const auto result = tern({"perplexity", "--model", kPythonModel.string(), "--text", text_.string(), "--threads",
                            "1", "-c", "16", "--stride", "8"});
  ASSERT_EQ(result.exit_code, 0);
  const auto report = perplexity_json(kPythonModel, text_, {"-c", "16", "--stride", "8"});
  EXPECT_EQ(result.output.rfind("PPL = ", 0), 0u) << result.output;
  EXPECT_NE(result.output.find(fmt::format("{:.4f} +/- {:.5f}", report["perplexity"].get<double>(),
                                           report["std_error"].get<double>())),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find(fmt::format("over {} tokens", num_text_tokens(kPythonModel))), std::string::npos)
      << result.output;
}

TEST_F(PerplexityCommand, BadInputExitsWithCodeTwo) {
  const auto run = [&](const fs::path& model, const fs::path& text, std::vector<std::string> flags) {
    std::vector<std::string> args = {"perplexity", "--model", model.string(), "--text", text.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    return tern(args).exit_code;
  };
  EXPECT_EQ(run(kPythonModel, fs::temp_directory_path() / "tern_perplexity_no_such_file.txt", {}), 2);
  EXPECT_EQ(run(kPythonModel, fs::temp_directory_path(), {}), 2);  // a directory
  const fs::path empty = write_temp_file("empty.txt", "");
  EXPECT_EQ(run(kPythonModel, empty, {}), 2);
  const fs::path invalid_utf8 = write_temp_file("invalid.txt", "x = '\xff\xfe'\n");
  EXPECT_EQ(run(kPythonModel, invalid_utf8, {}), 2);
  const fs::path one_token = write_temp_file("one_token.txt", "a");
  ASSERT_EQ(Tokenizer::load(kNoBosModel).encode("a", false).size(), 1u);
  EXPECT_EQ(run(kNoBosModel, one_token, {}), 2);  // no BOS: one token, nothing to score it from
  EXPECT_EQ(run(kPythonModel, one_token, {}), 0);  // BOS + one token: one token scored
  EXPECT_EQ(run(kPythonModel, text_, {"--context-length", "1"}), 2);
  EXPECT_EQ(run(kPythonModel, text_, {"--context-length", "0"}), 2);
  EXPECT_EQ(run(kPythonModel, text_, {"--context-length", "2049"}), 2);  // the model has 2048 positions
  EXPECT_EQ(run(kPythonModel, text_, {"--context-length", "2048", "--max-chunks", "1"}), 0);
  EXPECT_EQ(run(kPythonModel, text_, {"--stride", "0"}), 2);
  EXPECT_EQ(run(kPythonModel, text_, {"-c", "16", "--stride", "17"}), 2);
  // A window's first position is only context: a stride of the whole window would skip a token per window.
  EXPECT_EQ(run(kPythonModel, text_, {"-c", "16", "--stride", "16"}), 2);
  EXPECT_EQ(run(kPythonModel, text_, {"--max-chunks", "0"}), 2);
  EXPECT_NE(run(kPythonModel, text_, {"--no-such-flag"}), 0);  // CLI11's own error
  EXPECT_NE(run(kPythonModel, text_, {"--context-length", "many"}), 0);
  for (const auto& file : {empty, invalid_utf8, one_token}) fs::remove(file);
}

}  // namespace
}  // namespace tern
