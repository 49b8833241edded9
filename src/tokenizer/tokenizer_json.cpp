#include "tokenizer/tokenizer_json.h"

#include <cstdio>
#include <memory>

#include "core/error.h"

namespace tern {

namespace {

using json = nlohmann::json;

// Builds a DOM like nlohmann's own SAX DOM parser, except for model.vocab and model.merges.
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

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source) {
  TokenizerJson out;
  TokenizerJsonSax sax(out, source);
  json::sax_parse(text.begin(), text.end(), &sax);
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
