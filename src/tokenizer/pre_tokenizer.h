#pragma once
// Pre-tokenizers from tokenizer.json ("pre_tokenizer"): they cut normalized text into the pieces ("words") that
// the model encodes one at a time. Supported: Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit,
// Sequence.
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tern {

struct PreTokenPiece {
  std::string_view text;
  bool at_text_start;  // begins at offset 0 of the caller's text (Metaspace's prepend_scheme "first" needs it)
};

// The pieces of one text. Pieces view either the caller's text or strings owned here.
class PreTokenizedText {
 public:
  explicit PreTokenizedText(std::string_view text, bool at_text_start) { pieces.push_back({text, at_text_start}); }
  std::string_view own(std::string text) { return storage_.emplace_back(std::move(text)); }

  std::vector<PreTokenPiece> pieces;

 private:
  std::deque<std::string> storage_;  // a deque keeps the addresses of earlier strings stable
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedText& text) const = 0;
};

struct PreTokenizerBuild {
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // nullptr for a JSON null
  // True when the last stage is ByteLevel: its pieces are then left as raw bytes instead of being spelled in the
  // byte-level alphabet, and the model maps bytes to tokens itself (same result, no per-piece re-encoding).
  bool emits_raw_bytes = false;
};

PreTokenizerBuild make_pre_tokenizer(const nlohmann::json& config);

}  // namespace tern
