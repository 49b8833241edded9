#pragma once
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT-compiled) used by the Split pre-tokenizer.
// Hugging Face uses Oniguruma; PCRE2 accepts the same syntax for the patterns tokenizers ship (\p{L}, (?i:...),
// lookahead). Matching is const and thread-safe: each call brings its own match data.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace tern {

class Regex {
 public:
  enum class Syntax { kRegex, kLiteral };
  Regex(std::string_view pattern, Syntax syntax);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls on_match(start, end) for every non-overlapping match, left to right. The text must be valid UTF-8.
  void for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace tern
