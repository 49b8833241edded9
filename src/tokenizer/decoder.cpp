#include "tokenizer/decoder.h"

#include <charconv>
#include <optional>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace tern {

namespace {

using json = nlohmann::json;

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (std::string& token : tokens) {
      to_bytes(token);
      bytes += token;
    }
    tokens.assign(1, utf8::lossy(bytes));
  }
  void to_bytes(std::string& token) const override {
    if (auto decoded = byte_level::decode(token)) token = std::move(*decoded);
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) to_bytes(token);
  }
  void to_bytes(std::string& token) const override {
    std::string out;
    std::size_t copied = 0;
    bool matched = false;
    pattern_.for_each_match(token, [&](std::size_t start, std::size_t end) {
      out.append(token, copied, start - copied);
      out += content_;
      copied = end;
      matched = true;
    });
    if (!matched) return;
    out.append(token, copied, std::string::npos);
    token = std::move(out);
  }

 private:
  Regex pattern_;
  std::string content_;
};

std::optional<unsigned char> parse_byte_token(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  unsigned value = 0;
  const char* digits = token.data() + 3;
  if (std::from_chars(digits, digits + 2, value, 16).ptr != digits + 2) return std::nullopt;
  return static_cast<unsigned char>(value);
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending_bytes;
    const auto flush = [&] {
      if (pending_bytes.empty()) return;
      if (!utf8::first_invalid_offset(pending_bytes)) {
        out.push_back(pending_bytes);
      } else {
        // One replacement character per byte, as Hugging Face's ByteFallback does.
        for (std::size_t i = 0; i < pending_bytes.size(); ++i) out.emplace_back(utf8::kReplacementChar);
      }
      pending_bytes.clear();
    };
    for (std::string& token : tokens) {
      if (const auto byte = parse_byte_token(token)) {
        pending_bytes.push_back(static_cast<char>(*byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
  void to_bytes(std::string& token) const override {
    if (const auto byte = parse_byte_token(token)) token.assign(1, static_cast<char>(*byte));
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
  void to_bytes(std::string&) const override {}
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::size_t> char_starts;
      std::vector<char32_t> chars;
      std::size_t pos = 0;
      while (pos < token.size()) {
        char_starts.push_back(pos);
        chars.push_back(utf8::next_codepoint(token, pos));
      }
      char_starts.push_back(token.size());
      std::size_t cut_start = 0;
      while (cut_start < start_ && cut_start < chars.size() && chars[cut_start] == content_) ++cut_start;
      std::size_t cut_stop = chars.size();
      for (std::size_t i = 0; i < stop_ && cut_stop > cut_start && chars[cut_stop - 1] == content_; ++i) --cut_stop;
      token = token.substr(char_starts[cut_start], char_starts[cut_stop] - char_starts[cut_start]);
    }
  }
  void to_bytes(std::string&) const override {}

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) replace(tokens[i], i == 0 && strip_first_ ? "" : " ");
  }
  void to_bytes(std::string& token) const override { replace(token, " "); }

 private:
  void replace(std::string& token, std::string_view with) const {
    std::string out;
    std::size_t pos = 0;
    while (true) {
      const std::size_t found = token.find(replacement_, pos);
      out.append(token, pos, found == std::string::npos ? std::string::npos : found - pos);
      if (found == std::string::npos) break;
      out += with;
      pos = found + replacement_.size();
    }
    token = std::move(out);
  }
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }
  void to_bytes(std::string& token) const override {
    for (const auto& step : steps_) step->to_bytes(token);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

std::size_t non_negative(const json& config, const char* field) {
  const json value = config.value(field, json(0));
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    fail("tokenizer.json: Strip decoder field '{}' must be a non-negative integer", field);
  }
  return value.get<std::size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& config) {
  if (config.is_null()) return nullptr;
  if (!config.is_object()) fail("tokenizer.json: decoder must be an object, got {}", config.dump());
  const std::string type = required_string(config, "type", "decoder");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(make_pattern(config.value("pattern", json()), "Replace decoder"),
                                            required_string(config, "content", "Replace decoder"));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = required_string(config, "content", "Strip decoder");
    std::size_t pos = 0;
    if (content.empty() || utf8::first_invalid_offset(content) || (utf8::next_codepoint(content, pos), pos) != content.size()) {
      fail("tokenizer.json: Strip decoder content must be one character, got '{}'", content);
    }
    pos = 0;
    return std::make_unique<StripDecoder>(utf8::next_codepoint(content, pos), non_negative(config, "start"),
                                          non_negative(config, "stop"));
  }
  if (type == "Metaspace") {
    bool strip_first = config.value("add_prefix_space", true);
    if (const auto it = config.find("prepend_scheme"); it != config.end() && it->is_string()) {
      strip_first = it->get<std::string>() != "never";
    }
    return std::make_unique<MetaspaceDecoder>(config.value("replacement", std::string("\xE2\x96\x81")), strip_first);
  }
  if (type == "Sequence") {
    const auto it = config.find("decoders");
    if (it == config.end() || !it->is_array()) fail("tokenizer.json: Sequence decoder needs a 'decoders' array");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : *it) {
      if (auto decoder = make_decoder(step)) steps.push_back(std::move(decoder));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  fail("tokenizer.json: unsupported decoder type '{}'", type);
}

}  // namespace tern
