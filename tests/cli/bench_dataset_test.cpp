// `tern bench --dataset-name text`: prompts cut from real text (what speculative decoding's acceptance is measured
// on), the report naming the dataset, and the mistakes refused with a reason before any model loads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_command.h"
#include "cli/bench_prompts.h"
#include "core/error.h"
#include "fixtures.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

const fs::path kPythonModel = testing::fixtures_dir() / "models" / "tern-py-13m";

const std::string kFibonacci =
    "def fibonacci(n):\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n\n\n"
    "def factorial(n):\n"
    "    return 1 if n < 2 else n * factorial(n - 1)\n";

class BenchDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tern_bench_dataset_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "corpus" / "nested");
    std::ofstream(dir_ / "corpus" / "a.py") << kFibonacci;
    std::ofstream(dir_ / "corpus" / "nested" / "b.py") << kFibonacci;
    std::ofstream(dir_ / "corpus" / "notes.txt") << "not python";
    fs::create_directories(dir_ / "empty");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `tern bench` on the Python fixture model, small enough for the CPU, with `args` after the common flags.
  testing::BenchRun bench(const std::string& args) const {
    return testing::run_bench(dir_, "--model " + kPythonModel.string() + " --backend cpu --threads 1 --num-kv-blocks 64 --num-prompts 3 --output-len 4 " + args);
  }

  fs::path dir_;
};

TEST_F(BenchDataset, TextFromAFile) {
  const fs::path file = dir_ / "corpus" / "a.py";
  const testing::BenchRun result = bench("--input-len 8 --dataset-name text --dataset-path " + file.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto report = nlohmann::json::parse(result.out);
  const auto num_tokens = Tokenizer::load(kPythonModel).encode(kFibonacci, false).size();
  EXPECT_EQ(report.at("dataset"), (nlohmann::json{{"name", "text"}, {"path", file.string()}, {"files", 1},
                                                  {"tokens", num_tokens}}));
  EXPECT_GT(report.at("output_tokens_per_s").get<double>(), 0);
}

TEST_F(BenchDataset, TextFromADirectoryFilteredByGlob) {
  const testing::BenchRun result = bench("--input-len 8 --dataset-name text --dataset-path " + (dir_ / "corpus").string() +
                                 " --dataset-glob '*.py'");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto dataset = nlohmann::json::parse(result.out).at("dataset");
  EXPECT_EQ(dataset.at("files"), 2);
  EXPECT_EQ(dataset.at("glob"), "*.py");
  EXPECT_EQ(dataset.at("tokens"), 2 * Tokenizer::load(kPythonModel).encode(kFibonacci, false).size());
}

TEST_F(BenchDataset, RandomByDefault) {
  const testing::BenchRun result = bench("--input-len 8");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(nlohmann::json::parse(result.out).at("dataset"), (nlohmann::json{{"name", "random"}}));
}

TEST_F(BenchDataset, MistakesAreRefusedWithAReason) {
  const auto refused = [&](const std::string& args, const std::string& reason) {
    const testing::BenchRun result = bench(args);
    EXPECT_EQ(result.exit_code, 1) << args;
    EXPECT_NE(result.err.find("tern: error: bench: " + reason), std::string::npos) << result.err;
  };
  const std::string file = (dir_ / "corpus" / "a.py").string();
  refused("--dataset-name text", "--dataset-name text needs --dataset-path");
  refused("--dataset-path " + file, "--dataset-path is read only with --dataset-name text or edit");
  refused("--dataset-name edit", "--dataset-name edit needs --dataset-path");
  const std::string missing = (dir_ / "missing").string(), empty = (dir_ / "empty").string();
  refused("--dataset-name text --dataset-path " + missing, "--dataset-path " + missing + " does not exist");
  refused("--dataset-name text --dataset-path " + empty, "--dataset-path " + empty + " holds no files");
  refused("--dataset-name text --dataset-path " + (dir_ / "corpus").string() + " --dataset-glob '*.rs'",
          "no file under --dataset-path");
  refused("--dataset-name text --dataset-path " + file + " --input-len 100000", "the text of --dataset-path");
  refused("--dataset-name edit --dataset-path " + file + " --input-len 4", "--dataset-name edit needs an --input-len");
  EXPECT_NE(bench("--dataset-name json").exit_code, 0);
}

// The windows themselves: input-len tokens of the text each, different for each prompt while the text has room, and
// the same for the same --prompt-seed.
TEST_F(BenchDataset, PromptsAreDistinctWindowsOfTheText) {
  const Tokenizer tokenizer = Tokenizer::load(kPythonModel);
  cli::BenchDatasetFlags flags;
  flags.name = "text";
  flags.path = (dir_ / "corpus" / "a.py").string();
  const auto text = tokenizer.encode(kFibonacci, false);
  const auto prompts = cli::text_prompts(flags, tokenizer, 6, 8, /*seed=*/7);
  ASSERT_EQ(prompts.token_ids.size(), 6u);
  for (size_t i = 0; i < prompts.token_ids.size(); ++i) {
    const auto& prompt = prompts.token_ids[i];
    ASSERT_EQ(prompt.size(), 8u);
    EXPECT_NE(std::search(text.begin(), text.end(), prompt.begin(), prompt.end()), text.end()) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(prompt, prompts.token_ids[j]) << i << " " << j;
  }
  EXPECT_EQ(cli::text_prompts(flags, tokenizer, 6, 8, 7).token_ids, prompts.token_ids);
  EXPECT_NE(cli::text_prompts(flags, tokenizer, 6, 8, 8).token_ids, prompts.token_ids);
  EXPECT_THROW(cli::text_prompts(flags, tokenizer, 1, static_cast<int64_t>(text.size()) + 1, 7), Error);
  EXPECT_EQ(cli::text_prompts(flags, tokenizer, 1, static_cast<int64_t>(text.size()), 7).token_ids[0], text);
}

// An edit prompt: a window of the text, the request line, then the window's first 8 tokens again, input-len in all.
TEST_F(BenchDataset, EditPromptsRepeatTheStartOfTheirWindow) {
  const Tokenizer tokenizer = Tokenizer::load(kPythonModel);
  cli::BenchDatasetFlags flags;
  flags.name = "edit";
  flags.path = (dir_ / "corpus" / "a.py").string();
  const auto text = tokenizer.encode(kFibonacci, false);
  const auto request = tokenizer.encode("\n\n# The code above, with its names made clearer:\n", false);
  const int64_t input_len = static_cast<int64_t>(request.size()) + 8 + 12;
  const auto prompts = cli::text_prompts(flags, tokenizer, 3, input_len, /*seed=*/7);
  EXPECT_EQ(prompts.dataset.at("name"), "edit");
  ASSERT_EQ(prompts.token_ids.size(), 3u);
  for (const auto& prompt : prompts.token_ids) {
    ASSERT_EQ(static_cast<int64_t>(prompt.size()), input_len);
    const std::vector<int32_t> window(prompt.begin(), prompt.begin() + 12);
    EXPECT_NE(std::search(text.begin(), text.end(), window.begin(), window.end()), text.end());
    EXPECT_TRUE(std::equal(request.begin(), request.end(), prompt.begin() + 12));
    EXPECT_TRUE(std::equal(window.begin(), window.begin() + 8, prompt.end() - 8));
  }
}

}  // namespace
}  // namespace tern
