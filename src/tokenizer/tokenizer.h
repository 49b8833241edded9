#pragma once
// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) that encodes and decodes byte-exactly like the
// `tokenizers` library: added tokens are matched first, then each remaining piece is normalized, pre-tokenized and
// BPE-encoded; the post-processor adds BOS/EOS when asked. Loaded once, then shared: every method is const and
// safe to call from several threads, and copies share one immutable model.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace tern {

struct TokenizerModel;

class Tokenizer {
 public:
  // Reads dir/tokenizer.json and, if present, dir/tokenizer_config.json. Throws tern::Error naming the file and
  // the part that is missing, malformed or unsupported.
  static Tokenizer load(const std::filesystem::path& dir);
  // The same from file contents (`tokenizer_config_json` may be empty); `source` names them in errors.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                             const std::string& source);

  // Throws tern::Error if text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Encodes texts on up to num_threads threads; the result is what encode() gives for each text, in order.
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts, bool add_special_tokens,
                                                 int num_threads) const;
  // Ids outside the vocabulary are skipped, as Hugging Face does. Invalid UTF-8 becomes U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The raw bytes one token stands for (byte-level characters decoded, ▁ as a space, <0xXX> as its byte);
  // an added token's content for added tokens. Throws tern::Error for ids outside [0, vocab_size()).
  const std::string& token_bytes(int32_t id) const;
  // The token as spelled in tokenizer.json (e.g. "Ġhello", "▁hello", "<|im_end|>"); empty for unused ids.
  const std::string& token_string(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;  // takes the tokenizer.json spelling
  int32_t vocab_size() const;  // highest id + 1, added tokens included

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const std::optional<std::string>& bos_token() const;  // from tokenizer_config.json
  const std::optional<std::string>& eos_token() const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  // What encode(..., add_special_tokens=true) puts around the text (e.g. {BOS} and {} for Llama 2).
  const std::vector<int32_t>& special_prefix_ids() const;
  const std::vector<int32_t>& special_suffix_ids() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerModel> model) : model_(std::move(model)) {}
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids) const;
  std::shared_ptr<const TokenizerModel> model_;
};

}  // namespace tern

#include "tokenizer/incremental_detokenizer.h"
