#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace tern::cli {

namespace {

// Documents are separated by blank lines, the same split bench/bench_tokenizer_hf.py uses.
std::vector<std::string> split_documents(const std::string& text) {
  std::vector<std::string> documents;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find("\n\n", start), text.size());
    documents.push_back(text.substr(start, end - start));
    start = end + 2;
  }
  return documents;
}

template <typename Fn>
double seconds(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void add_bench_tokenizer_command(CLI::App& app) {
  struct Options {
    std::string tokenizer;
    std::string text;
    int threads = 0;
    int repeat = 3;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench-tokenizer",
      "Measure tokenizer load time and encode throughput (single thread and batch); prints JSON. "
      "bench/bench_tokenizer_hf.py measures Hugging Face tokenizers on the same input");
  cmd->add_option("--tokenizer", options->tokenizer, "Directory with tokenizer.json")->required();
  cmd->add_option("--text", options->text, "Text file; blank lines separate the documents encoded one by one")
      ->required();
  cmd->add_option("--threads", options->threads, "Threads of the batch encode (0: all cores)")
      ->check(non_negative());
  cmd->add_option("--repeat", options->repeat, "Runs of each measurement; the best is reported")
      ->check(positive());
  cmd->callback([options] {
    const std::string text = read_file(options->text);
    const std::vector<std::string> documents = split_documents(text);
    const int threads = options->threads > 0 ? options->threads
                                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const double megabytes = static_cast<double>(text.size()) / 1e6;

    double best_load_s = 1e30, best_single_s = 1e30, best_batch_s = 1e30;
    std::size_t num_tokens = 0;
    for (int r = 0; r < options->repeat; ++r) {
      best_load_s = std::min(best_load_s, seconds([&] { Tokenizer::load(options->tokenizer); }));
    }
    const Tokenizer tokenizer = Tokenizer::load(options->tokenizer);
    for (int r = 0; r < options->repeat; ++r) {
      std::size_t tokens = 0;
      best_single_s = std::min(best_single_s, seconds([&] {
        for (const std::string& document : documents) tokens += tokenizer.encode(document, false).size();
      }));
      num_tokens = tokens;
      best_batch_s = std::min(best_batch_s, seconds([&] { tokenizer.encode_batch(documents, false, threads); }));
    }
    const nlohmann::json report = {
        {"tokenizer", options->tokenizer},
        {"text", options->text},
        {"text_bytes", text.size()},
        {"num_documents", documents.size()},
        {"num_tokens", num_tokens},
        {"repeat", options->repeat},
        {"threads", threads},
        {"hardware_threads", std::thread::hardware_concurrency()},
        {"load_ms", best_load_s * 1e3},
        {"encode_single_thread_mb_per_s", megabytes / best_single_s},
        {"encode_batch_mb_per_s", megabytes / best_batch_s},
    };
    std::printf("%s\n", report.dump(2).c_str());
  });
}

}  // namespace tern::cli
