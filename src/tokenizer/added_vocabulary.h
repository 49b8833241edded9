#pragma once
// Added tokens (tokenizer.json "added_tokens"): strings matched in the input before normalization and
// pre-tokenization, each becoming its id directly. Matching follows Hugging Face's AddedVocabulary: leftmost-longest,
// with the single_word, lstrip and rstrip rules applied to each match.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tern {

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in normalized text (content normalized the same way) instead of raw text
  bool special = false;
};

// A run of text (no token) or one matched added token.
struct AddedTokenSplit {
  std::size_t start, end;  // byte range of the input
  int32_t token_id;        // -1 for plain text
};

// Finds one family of added tokens (the raw ones or the normalized ones) in text.
class AddedTokenMatcher {
 public:
  // `patterns[i]` is what is searched for token `tokens[i]` (its content, normalized for normalized tokens).
  void add(const AddedToken& token, std::string pattern);
  void build();  // call once after the last add()
  bool empty() const { return entries_.empty(); }
  // Covers the whole text with splits in order; plain-text splits are never empty.
  std::vector<AddedTokenSplit> split(std::string_view text) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  std::vector<Entry> entries_;
  // Indices into entries_ by first byte, longest pattern first, so the first hit is the longest match.
  std::array<std::vector<uint32_t>, 256> candidates_by_first_byte_;
};

}  // namespace tern
