#include "tokenizer/tokenizer_json.h"

#include <charconv>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tern {

namespace {

using json = nlohmann::json;

// Builds a DOM like nlohmann's own SAX DOM parser, except for model.vocab and model.merges.
// Its callbacks throw tern::Error on content it cannot take, so they never return false.
class TokenizerJsonSax : public nlohmann::json_sax<json> {
 public:
  explicit TokenizerJsonSax(TokenizerJson& out, const std::string& source) : out_(out), source_(source) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab && depth_in_mode_ == 0) {
      out_.vocab.emplace_back(std::move(vocab_key_), v);
      return true;
    }
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab && depth_in_mode_ == 0) {
      out_.vocab.emplace_back(std::move(vocab_key_), static_cast<int64_t>(v));
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t& v) override { return value(json(std::move(v))); }

  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      if (depth_in_mode_ == 0) {  // "left right" form
        const std::size_t space = v.find(' ');
        if (space == std::string::npos || v.find(' ', space + 1) != std::string::npos) {
          fail("{}: model.merges entry '{}' is not two tokens separated by one space", source_, v);
        }
        out_.merges.emplace_back(v.substr(0, space), v.substr(space + 1));
      } else {  // ["left", "right"] form
        merge_parts_.push_back(std::move(v));
      }
      return true;
    }
    if (mode_ == Mode::kVocab) fail("{}: model.vocab value for '{}' is not an integer id", source_, vocab_key_);
    return value(json(std::move(v)));
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    keys_.back() = k;
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kNone) {
      if (mode_ == Mode::kVocab) fail("{}: model.vocab value for '{}' is not an integer id", source_, vocab_key_);
      fail("{}: model.merges entries must be strings or pairs of strings", source_);
    }
    if (at_model_field("vocab")) {
      mode_ = Mode::kVocab;
      out_.has_vocab_object = true;
      return true;
    }
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kNone;
      return true;
    }
    return close();
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      if (depth_in_mode_ != 0) fail("{}: model.merges entries must be strings or pairs of strings", source_);
      ++depth_in_mode_;
      merge_parts_.clear();
      return true;
    }
    if (mode_ == Mode::kVocab) fail("{}: model.vocab value for '{}' is not an integer id", source_, vocab_key_);
    if (at_model_field("merges")) {
      mode_ = Mode::kMerges;
      depth_in_mode_ = 0;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMerges) {
      if (depth_in_mode_ == 0) {
        mode_ = Mode::kNone;
        return true;
      }
      --depth_in_mode_;
      if (merge_parts_.size() != 2) fail("{}: model.merges entry is not a pair of tokens", source_);
      out_.merges.emplace_back(std::move(merge_parts_[0]), std::move(merge_parts_[1]));
      return true;
    }
    return close();
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: invalid JSON near byte {}: {}", source_, position, e.what());
  }

 private:
  enum class Mode { kNone, kVocab, kMerges };

  // True when the next value is root["model"][field].
  bool at_model_field(std::string_view field) const {
    return stack_.size() == 2 && stack_[0]->is_object() && keys_[0] == "model" && stack_[1]->is_object() &&
           keys_[1] == field;
  }

  json* insert(json&& v) {
    if (stack_.empty()) {
      out_.document = std::move(v);
      return &out_.document;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[keys_.back()];
    slot = std::move(v);
    return &slot;
  }
  bool value(json&& v) {
    if (mode_ != Mode::kNone) {
      if (mode_ == Mode::kVocab) fail("{}: model.vocab value for '{}' is not an integer id", source_, vocab_key_);
      fail("{}: model.merges entries must be strings or pairs of strings", source_);
    }
    insert(std::move(v));
    return true;
  }
  bool open(json&& container) {
    stack_.push_back(insert(std::move(container)));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  TokenizerJson& out_;
  const std::string& source_;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // the current key of each open object (unused for arrays)
  Mode mode_ = Mode::kNone;
  int depth_in_mode_ = 0;
  std::string vocab_key_;
  std::vector<std::string> merge_parts_;
};

// A JSON parser that drives a SAX handler. nlohmann's own lexer reads one character at a time through an input
// adapter, which made it most of the load time; this one scans strings in bulk. It accepts exactly RFC 8259 JSON.
class JsonReader {
 public:
  JsonReader(std::string_view text, nlohmann::json_sax<json>& sax, const std::string& source)
      : text_(text), sax_(sax), source_(source) {}

  void parse() {
    if (const auto invalid = utf8::first_invalid_offset(text_)) error_at(*invalid, "invalid UTF-8");
    skip_whitespace();
    parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) error("unexpected content after the top-level value");
  }

 private:
  static constexpr int kMaxDepth = 256;

  [[noreturn]] void error_at(std::size_t at, std::string_view what) const {
    fail("{}: invalid JSON at byte {}: {}", source_, at, what);
  }
  [[noreturn]] void error(std::string_view what) const { error_at(pos_, what); }

  void skip_whitespace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
      ++pos_;
    }
  }
  void expect(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) error(fmt::format("expected '{}'", c));
    ++pos_;
  }

  void parse_value(int depth) {
    if (depth > kMaxDepth) error("nesting deeper than 256 levels");
    if (pos_ >= text_.size()) error("unexpected end of input");
    switch (text_[pos_]) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': {
        std::string value = parse_string();
        sax_.string(value);
        return;
      }
      case 't': return parse_literal("true", [&] { sax_.boolean(true); });
      case 'f': return parse_literal("false", [&] { sax_.boolean(false); });
      case 'n': return parse_literal("null", [&] { sax_.null(); });
      default: return parse_number();
    }
  }

  template <typename Emit>
  void parse_literal(std::string_view literal, Emit&& emit) {
    if (text_.substr(pos_, literal.size()) != literal) error("invalid literal");
    pos_ += literal.size();
    emit();
  }

  // Parses `{ members }` or `[ elements ]` from its opening bracket, calling parse_element for each member.
  template <typename ParseElement>
  void parse_sequence(char close, ParseElement&& parse_element) {
    ++pos_;
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == close) {
      ++pos_;
      return;
    }
    while (true) {
      skip_whitespace();
      parse_element();
      skip_whitespace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(close);
      return;
    }
  }

  void parse_object(int depth) {
    sax_.start_object(static_cast<std::size_t>(-1));
    parse_sequence('}', [&] {
      if (pos_ >= text_.size() || text_[pos_] != '"') error("expected a string key");
      std::string key = parse_string();
      sax_.key(key);
      skip_whitespace();
      expect(':');
      skip_whitespace();
      parse_value(depth + 1);
    });
    sax_.end_object();
  }

  void parse_array(int depth) {
    sax_.start_array(static_cast<std::size_t>(-1));
    parse_sequence(']', [&] { parse_value(depth + 1); });
    sax_.end_array();
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > text_.size()) error("truncated \\u escape");
    unsigned value = 0;
    const char* digits = text_.data() + pos_;
    if (std::from_chars(digits, digits + 4, value, 16).ptr != digits + 4) error("invalid \\u escape");
    pos_ += 4;
    return value;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      std::size_t run = pos_;
      while (run < text_.size() && text_[run] != '"' && text_[run] != '\\' &&
             static_cast<unsigned char>(text_[run]) >= 0x20) {
        ++run;
      }
      out.append(text_, pos_, run - pos_);
      pos_ = run;
      if (pos_ >= text_.size()) error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') error_at(pos_ - 1, "control character in string");
      if (pos_ >= text_.size()) error("unterminated string");
      switch (text_[pos_++]) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          char32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") error("unpaired UTF-16 surrogate");
            pos_ += 2;
            const unsigned low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) error("unpaired UTF-16 surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("unpaired UTF-16 surrogate");
          }
          utf8::append_codepoint(out, cp);
          break;
        }
        default: error_at(pos_ - 1, "invalid escape");
      }
    }
  }

  void parse_number() {
    const std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const auto digits = [&] {
      const std::size_t first = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - first;
    };
    const std::size_t int_start = pos_;
    const std::size_t num_int_digits = digits();
    if (num_int_digits == 0) error_at(start, "expected a value");
    if (num_int_digits > 1 && text_[int_start] == '0') error_at(start, "leading zero in number");
    bool is_integer = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) error("expected digits after '.'");
      is_integer = false;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) error("expected digits in exponent");
      is_integer = false;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (is_integer) {
      if (*first == '-') {
        int64_t value = 0;
        if (std::from_chars(first, last, value).ec == std::errc()) {
          sax_.number_integer(value);
          return;
        }
      } else {
        uint64_t value = 0;
        if (std::from_chars(first, last, value).ec == std::errc()) {
          sax_.number_unsigned(value);
          return;
        }
      }
    }
    double value = 0;
    if (std::from_chars(first, last, value).ec != std::errc()) error_at(start, "number out of range");
    std::string spelling(first, last);
    sax_.number_float(value, spelling);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  nlohmann::json_sax<json>& sax_;
  const std::string& source_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source) {
  TokenizerJson out;
  TokenizerJsonSax sax(out, source);
  JsonReader(text, sax, source).parse();
  if (!out.document.is_object()) fail("{}: expected a JSON object at the top level", source);
  return out;
}

std::string required_string(const json& config, const char* field, std::string_view where) {
  const auto it = config.find(field);
  if (it == config.end() || !it->is_string()) fail("tokenizer.json: {} needs a string field '{}'", where, field);
  return it->get<std::string>();
}

Regex make_pattern(const json& pattern, std::string_view where) {
  if (pattern.is_object()) {
    if (const auto it = pattern.find("String"); it != pattern.end() && it->is_string()) {
      return Regex(it->get<std::string>(), Regex::Syntax::kLiteral);
    }
    if (const auto it = pattern.find("Regex"); it != pattern.end() && it->is_string()) {
      return Regex(it->get<std::string>(), Regex::Syntax::kRegex);
    }
  }
  fail("tokenizer.json: {} pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", where, pattern.dump());
}

std::string read_file(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) fail("cannot open {}", path.string());
  std::string content;
  char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) content.append(buffer, n);
  if (std::ferror(file.get())) fail("cannot read {}", path.string());
  return content;
}

}  // namespace tern
