#include "cli/bench_prompts.h"

#include <fnmatch.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tern::cli {

namespace fs = std::filesystem;

namespace {

// --dataset-name edit: after the window, this line and the window's first tokens again (the answer's start).
constexpr const char* kEditRequest = "\n\n# The code above, with its names made clearer:\n";
constexpr int64_t kEditRestartTokens = 8;

// The path itself when it is a file; a directory's regular files (recursively, those whose names match `glob` where
// one is given) in sorted path order.
std::vector<fs::path> dataset_files(const std::string& path, const std::string& glob) {
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status)) fail("bench: --dataset-path {} does not exist", path);
  if (!fs::is_directory(status)) return {fs::path(path)};
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied)) {
    if (!entry.is_regular_file()) continue;
    if (!glob.empty() && fnmatch(glob.c_str(), entry.path().filename().c_str(), 0) != 0) continue;
    files.push_back(entry.path());
  }
  if (files.empty()) {
    if (glob.empty()) fail("bench: --dataset-path {} holds no files", path);
    fail("bench: no file under --dataset-path {} matches --dataset-glob '{}'", path, glob);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("bench: cannot read {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void BenchDatasetFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--dataset-name", name,
                 "Where the prompts come from: random (token ids), text (windows of --dataset-path's text, "
                 "tokenized with the model's tokenizer; what speculative decoding's acceptance needs), edit (a "
                 "window of that text, a line asking for it edited and the window's first tokens again: an answer "
                 "that mostly repeats its prompt, as code edits do) or multi-turn (--num-prompts conversations of "
                 "--num-turns turns, each turn's prompt the conversation so far and a new message of --input-len "
                 "random ids: what a prefix cache and the KV tiers below it serve)")
      ->check(CLI::IsMember({"random", "text", "edit", "multi-turn"}))
      ->capture_default_str();
  cmd.add_option("--dataset-path", path,
                 "text, edit: a file, or a directory whose files are read recursively in sorted path order");
  cmd.add_option("--dataset-glob", glob,
                 "text, edit from a directory: only the files whose names match, e.g. '*.py'");
}

bool BenchDatasetFlags::reads_text() const { return name == "text" || name == "edit"; }

void BenchDatasetFlags::validate() const {
  if (reads_text() && path.empty()) fail("bench: --dataset-name {} needs --dataset-path", name);
  if (!reads_text() && !path.empty()) fail("bench: --dataset-path is read only with --dataset-name text or edit");
  if (!reads_text() && !glob.empty()) fail("bench: --dataset-glob is read only with --dataset-name text or edit");
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab_size) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab_size - 1));
  std::vector<int32_t> prompt(len);
  for (auto& id : prompt) id = token(rng);
  return prompt;
}

BenchPrompts random_prompts(int64_t num_prompts, int64_t input_len, int64_t vocab_size, uint32_t seed) {
  BenchPrompts prompts{{}, {{"name", "random"}}};
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < num_prompts; ++i) prompts.token_ids.push_back(random_prompt(rng, input_len, vocab_size));
  return prompts;
}

BenchPrompts text_prompts(const BenchDatasetFlags& flags, const Tokenizer& tokenizer, int64_t num_prompts,
                          int64_t input_len, uint32_t seed) {
  const auto files = dataset_files(flags.path, flags.glob);
  std::vector<int32_t> text;
  for (const auto& file : files) {
    try {
      const auto ids = tokenizer.encode(read_file(file), /*add_special_tokens=*/false);
      text.insert(text.end(), ids.begin(), ids.end());
    } catch (const Error& e) {
      fail("bench: {}: {}", file.string(), e.what());
    }
  }
  const bool edit = flags.name == "edit";
  const std::vector<int32_t> request = edit ? tokenizer.encode(kEditRequest, false) : std::vector<int32_t>{};
  const int64_t extra = edit ? static_cast<int64_t>(request.size()) + kEditRestartTokens : 0;
  if (input_len <= extra) {
    fail("bench: --dataset-name edit needs an --input-len above {} (its request line and restart)", extra);
  }
  const int64_t window = input_len - extra;
  const auto num_tokens = static_cast<int64_t>(text.size());
  if (num_tokens < window) {
    fail("bench: the text of --dataset-path {} is {} tokens, fewer than the {} a prompt takes", flags.path, num_tokens,
         window);
  }
  const int64_t num_windows = num_tokens - window + 1;
  const int64_t stride = std::max<int64_t>(1, num_windows / num_prompts);
  std::mt19937 rng(seed);
  const int64_t start = std::uniform_int_distribution<int64_t>(0, num_windows - 1)(rng);
  BenchPrompts prompts;
  for (int64_t i = 0; i < num_prompts; ++i) {
    const auto offset = text.begin() + (start + i * stride) % num_windows;
    std::vector<int32_t>& prompt = prompts.token_ids.emplace_back(offset, offset + window);
    if (!edit) continue;
    prompt.insert(prompt.end(), request.begin(), request.end());
    prompt.insert(prompt.end(), offset, offset + std::min(window, kEditRestartTokens));
  }
  prompts.dataset = {{"name", flags.name},
                     {"path", flags.path},
                     {"files", files.size()},
                     {"tokens", num_tokens}};
  if (!flags.glob.empty()) prompts.dataset["glob"] = flags.glob;
  return prompts;
}

}  // namespace tern::cli
