#include "tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tern {

namespace {

// Rust's char::is_alphanumeric() || c == '_' (Alphabetic or Numeric), the word test of single_word tokens.
bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool is_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Start of the code point that ends just before `end`.
std::size_t previous_char_start(std::string_view text, std::size_t end) {
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

char32_t char_before(std::string_view text, std::size_t end) {
  std::size_t start = previous_char_start(text, end);
  return utf8::next_codepoint(text, start);
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token, std::string pattern) {
  if (pattern.empty()) return;
  entries_.push_back({std::move(pattern), token});
}

void AddedTokenMatcher::build() {
  for (auto& list : candidates_by_first_byte_) list.clear();
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    candidates_by_first_byte_[static_cast<unsigned char>(entries_[i].pattern[0])].push_back(i);
  }
  for (auto& list : candidates_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return entries_[a].pattern.size() > entries_[b].pattern.size(); });
  }
}

std::vector<AddedTokenSplit> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<AddedTokenSplit> splits;
  std::size_t emitted = 0;  // everything before this offset is in `splits`
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = candidates_by_first_byte_[static_cast<unsigned char>(text[pos])];
    const Entry* match = nullptr;
    for (uint32_t index : candidates) {
      const Entry& entry = entries_[index];
      if (text.substr(pos, entry.pattern.size()) == entry.pattern) {
        match = &entry;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    std::size_t start = pos;
    std::size_t stop = pos + match->pattern.size();
    pos = stop;  // the search goes on after the match even when the rules below reject it
    const AddedToken& token = match->token;
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(char_before(text, start));
      std::size_t probe = stop;
      const bool word_after = stop < text.size() && is_word_char(utf8::next_codepoint(text, probe));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      std::size_t new_start = start;
      while (new_start > 0 && is_space(char_before(text, new_start))) new_start = previous_char_start(text, new_start);
      start = std::max(new_start, emitted);  // spaces an earlier token already took stay with it
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        std::size_t next = stop;
        if (!is_space(utf8::next_codepoint(text, next))) break;
        stop = next;
      }
      pos = stop;
    }
    if (emitted < start) splits.push_back({emitted, start, -1});
    splits.push_back({start, stop, token.id});
    emitted = stop;
  }
  if (emitted < text.size()) splits.push_back({emitted, text.size(), -1});
  return splits;
}

}  // namespace tern
