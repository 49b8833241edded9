#include "tokenizer/incremental_detokenizer.h"

#include <span>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tern {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_->decode(all.subspan(prefix_offset_), skip_special_tokens_);
  // A trailing U+FFFD means a character is still missing bytes: wait for the next token.
  if (new_text.size() <= prefix_text.size() || new_text.ends_with(utf8::kReplacementChar)) return {};
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(prefix_text.size());
}

std::string IncrementalDetokenizer::flush() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_->decode(all.subspan(prefix_offset_), skip_special_tokens_);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return {};
  return new_text.substr(prefix_text.size());
}

}  // namespace tern
