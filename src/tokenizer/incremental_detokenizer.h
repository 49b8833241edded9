#pragma once
// Streaming detokenization: tokens arrive one at a time and text leaves only once it is complete UTF-8, so that
// the concatenation of everything push() and flush() return equals decode() of the whole sequence.
//
// It keeps the prefix-offset scheme of vLLM and Hugging Face TGI: decode a short window of recent tokens twice,
// without and with the new ones, and emit the difference. Starting the window a few tokens back (at the last
// point where output was complete) gives decoders with context-dependent rules, such as SentencePiece's
// leading-space strip, the same context the full decode has.
#include <cstdint>
#include <string>
#include <vector>

namespace tern {

class Tokenizer;

class IncrementalDetokenizer {
 public:
  // The tokenizer must outlive the detokenizer.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  // Returns the text that the new token completes (often empty, e.g. mid-way through a multi-byte character).
  std::string push(int32_t id);
  // Returns whatever is still held back (incomplete UTF-8 decodes to U+FFFD here, as in a full decode).
  std::string flush();

  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  std::size_t prefix_offset_ = 0;  // start of the decode window
  std::size_t read_offset_ = 0;    // tokens before this have been emitted
};

}  // namespace tern
