#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace tern {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (data == nullptr) fail("regex: out of memory creating match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

Regex::Regex(std::string_view pattern, Syntax syntax) : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  // PCRE2_LITERAL allows no Unicode-property option; a literal needs none.
  const uint32_t options = syntax == Syntax::kLiteral ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                                  &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail("regex: cannot compile pattern '{}' at offset {}: {}", pattern, error_offset,
         reinterpret_cast<const char*>(message));
  }
  // JIT is a speed-up only; the interpreter gives the same matches where JIT is unavailable.
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::for_each_match(std::string_view text,
                           const std::function<void(std::size_t, std::size_t)>& on_match) const {
  MatchData match(compiled_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t offset = 0;
  while (offset <= text.size()) {
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(), offset, 0, match.data, nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match.data,
                                     nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail("regex: matching '{}' failed: {}", pattern_, reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const std::size_t start = ovector[0], end = ovector[1];
    if (end > start) {
      on_match(start, end);
      offset = end;
    } else {
      // An empty match splits nothing; step over one whole character so the next search starts on a boundary.
      if (start >= text.size()) return;
      offset = start + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
    }
  }
}

}  // namespace tern
