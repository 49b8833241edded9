#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace tern {

namespace {

using json = nlohmann::json;

class UnicodeNormalizer : public Normalizer {
 public:
  UnicodeNormalizer(int options, bool skip_ascii) : options_(options), skip_ascii_(skip_ascii) {}
  void normalize(std::string& text) const override {
    // ASCII text is already in every normal form, and most text is ASCII.
    if (skip_ascii_ && std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) return;
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &result, static_cast<utf8proc_option_t>(options_));
    if (len < 0) fail("unicode normalization failed: {}", utf8proc_errmsg(len));
    text.assign(reinterpret_cast<const char*>(result), static_cast<std::size_t>(len));
    std::free(result);
  }

 private:
  int options_;
  bool skip_ascii_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    std::size_t pos = 0;
    while (pos < text.size()) {
      const char32_t cp = utf8::next_codepoint(text, pos);
      utf8::append_codepoint(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    text = std::move(out);
  }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);  // Hugging Face leaves empty text empty
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    std::string out;
    std::size_t copied = 0;
    pattern_.for_each_match(text, [&](std::size_t start, std::size_t end) {
      out.append(text, copied, start - copied);
      out += content_;
      copied = end;
    });
    if (copied == 0 && out.empty()) return;
    out.append(text, copied, std::string::npos);
    text = std::move(out);
  }

 private:
  Regex pattern_;
  std::string content_;
};

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t next = begin;
        if (!is_unicode_whitespace(utf8::next_codepoint(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        std::size_t probe = start;
        if (!is_unicode_whitespace(utf8::next_codepoint(text, probe))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& config) {
  if (config.is_null()) return nullptr;
  if (!config.is_object()) fail("tokenizer.json: normalizer must be an object, got {}", config.dump());
  const std::string type = required_string(config, "type", "normalizer");
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE, true);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, true);
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, true);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, true);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(required_string(config, "prepend", "Prepend normalizer"));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(make_pattern(config.value("pattern", json()), "Replace normalizer"),
                                               required_string(config, "content", "Replace normalizer"));
  }
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(config.value("strip_left", false), config.value("strip_right", false));
  }
  if (type == "Sequence") {
    const auto it = config.find("normalizers");
    if (it == config.end() || !it->is_array()) fail("tokenizer.json: Sequence normalizer needs a 'normalizers' array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : *it) {
      if (auto normalizer = make_normalizer(step)) steps.push_back(std::move(normalizer));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  fail("tokenizer.json: unsupported normalizer type '{}'", type);
}

}  // namespace tern
