#pragma once
// The prompts of `tern bench` (vLLM's --dataset-name): random token ids, or windows of real text, which speculative
// decoding needs for its acceptance to mean anything. (multi-turn's conversations are bench_multi_turn.h's.)
#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tern::cli {

// --dataset-name, --dataset-path and --dataset-glob.
struct BenchDatasetFlags {
  std::string name = "random";
  std::string path;  // text: a file, or a directory read recursively
  std::string glob;  // text from a directory: only the files whose names match, e.g. '*.py'

  void add_to(CLI::App& cmd);
  // Refuses a combination that cannot mean anything (text without a path, a path or glob without text).
  void validate() const;
  bool reads_text() const;  // text or edit
};

struct BenchPrompts {
  std::vector<std::vector<int32_t>> token_ids;  // one per request
  nlohmann::json dataset;                       // what the report says about where they came from
};

// `len` ids drawn uniformly from [0, vocab_size).
std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab_size);
// `num_prompts` such prompts, drawn one after the other from one generator seeded with `seed`.
BenchPrompts random_prompts(int64_t num_prompts, int64_t input_len, int64_t vocab_size, uint32_t seed);

// The dataset's files (sorted by path), tokenized without special tokens and concatenated; prompt i is the window of
// `input_len` tokens at offset (start + i * stride) mod the number of windows, `start` drawn from `seed` and the
// stride spreading the prompts over the whole text, so that they differ while the text has room for them. With
// --dataset-name edit the window is shorter, followed by a line asking for the code edited and the window's first 8
// tokens again, `input_len` tokens in all: an answer that repeats the window is what prompt lookup drafts.
BenchPrompts text_prompts(const BenchDatasetFlags& flags, const Tokenizer& tokenizer, int64_t num_prompts,
                          int64_t input_len, uint32_t seed);

}  // namespace tern::cli
