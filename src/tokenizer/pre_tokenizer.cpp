#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_json.h"

namespace tern {

namespace {

using json = nlohmann::json;

// The pattern GPT-2 (and the ByteLevel pre-tokenizer with use_regex) splits on.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail("tokenizer.json: unknown Split behavior '{}'", name);
}

struct Segment {
  std::size_t start, end;
  bool is_match;
};

// Cuts one piece by the matches of a pattern, with the delimiter behaviors of Hugging Face's
// NormalizedString::split. Empty results are dropped, as PreTokenizedString::split does.
void split_piece(const PreTokenPiece& piece, const Regex& pattern, SplitBehavior behavior, bool invert,
                 std::vector<PreTokenPiece>& out) {
  const std::string_view text = piece.text;
  std::vector<Segment> segments;
  std::size_t previous_end = 0;
  pattern.for_each_match(text, [&](std::size_t start, std::size_t end) {
    if (start != previous_end) segments.push_back({previous_end, start, invert});
    segments.push_back({start, end, !invert});
    previous_end = end;
  });
  if (previous_end != text.size()) segments.push_back({previous_end, text.size(), invert});

  struct Range {
    std::size_t start, end;
    bool keep;
  };
  std::vector<Range> ranges;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) ranges.push_back({s.start, s.end, true});
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) ranges.push_back({s.start, s.end, !s.is_match});
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !ranges.empty()) {
          ranges.back().end = s.end;
        } else {
          ranges.push_back({s.start, s.end, true});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !ranges.empty()) {
          ranges.back().end = s.end;
        } else {
          ranges.push_back({s.start, s.end, true});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !ranges.empty()) {
          ranges.back().start = it->start;
        } else {
          ranges.push_back({it->start, it->end, true});
        }
        previous_match = it->is_match;
      }
      std::reverse(ranges.begin(), ranges.end());
      break;
    }
  }
  for (const Range& r : ranges) {
    if (!r.keep || r.end == r.start) continue;
    out.push_back({text.substr(r.start, r.end - r.start), piece.at_text_start && r.start == 0});
  }
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(PreTokenizedText& text) const override {
    std::vector<PreTokenPiece> out;
    out.reserve(text.pieces.size() * 4);
    for (const PreTokenPiece& piece : text.pieces) split_piece(piece, pattern_, behavior_, invert_, out);
    text.pieces = std::move(out);
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, bool map_to_chars)
      : add_prefix_space_(add_prefix_space),
        map_to_chars_(map_to_chars),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern, Regex::Syntax::kRegex) : nullptr) {}

  void pre_tokenize(PreTokenizedText& text) const override {
    if (add_prefix_space_) {
      for (PreTokenPiece& piece : text.pieces) {
        if (!piece.text.empty() && piece.text.front() == ' ') continue;
        std::string prefixed(1, ' ');
        prefixed.append(piece.text);
        piece.text = text.own(std::move(prefixed));
      }
    }
    if (regex_) {
      std::vector<PreTokenPiece> out;
      for (const PreTokenPiece& piece : text.pieces) split_piece(piece, *regex_, SplitBehavior::kIsolated, false, out);
      text.pieces = std::move(out);
    }
    if (map_to_chars_) {
      for (PreTokenPiece& piece : text.pieces) {
        std::string mapped;
        byte_level::encode(piece.text, mapped);
        piece.text = text.own(std::move(mapped));
      }
    }
  }

 private:
  bool add_prefix_space_;
  bool map_to_chars_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        replacement_pattern_(replacement_, Regex::Syntax::kLiteral) {}

  void pre_tokenize(PreTokenizedText& text) const override {
    std::vector<PreTokenPiece> out;
    for (PreTokenPiece piece : text.pieces) {
      std::string replaced;
      for (char c : piece.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced.push_back(c);
        }
      }
      const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && piece.at_text_start);
      if (prepend && !replaced.starts_with(replacement_)) replaced.insert(0, replacement_);
      piece.text = text.own(std::move(replaced));
      if (split_) {
        split_piece(piece, replacement_pattern_, SplitBehavior::kMergedWithNext, false, out);
      } else {
        out.push_back(piece);
      }
    }
    text.pieces = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  Regex replacement_pattern_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages) : stages_(std::move(stages)) {}
  void pre_tokenize(PreTokenizedText& text) const override {
    for (const auto& stage : stages_) stage->pre_tokenize(text);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

// `is_last` says whether this stage is the final one, so that a final ByteLevel can leave raw bytes.
std::unique_ptr<PreTokenizer> build(const json& config, bool is_last, bool& emits_raw_bytes) {
  if (!config.is_object()) fail("tokenizer.json: pre_tokenizer must be an object, got {}", config.dump());
  const std::string type = required_string(config, "type", "pre_tokenizer");
  if (type == "Split") {
    const json behavior = config.value("behavior", json("Isolated"));
    if (!behavior.is_string()) fail("tokenizer.json: Split pre_tokenizer behavior must be a string");
    return std::make_unique<SplitPreTokenizer>(make_pattern(config.value("pattern", json()), "Split pre_tokenizer"),
                                               parse_behavior(behavior.get<std::string>()),
                                               config.value("invert", false));
  }
  if (type == "ByteLevel") {
    if (is_last) emits_raw_bytes = true;
    return std::make_unique<ByteLevelPreTokenizer>(config.value("add_prefix_space", true),
                                                   config.value("use_regex", true), !is_last);
  }
  if (type == "Metaspace") {
    std::string replacement = config.value("replacement", std::string("\xE2\x96\x81"));
    MetaspacePreTokenizer::Prepend prepend = config.value("add_prefix_space", true)
                                                 ? MetaspacePreTokenizer::Prepend::kAlways
                                                 : MetaspacePreTokenizer::Prepend::kNever;
    if (const auto it = config.find("prepend_scheme"); it != config.end() && it->is_string()) {
      const std::string scheme = it->get<std::string>();
      if (scheme == "always") {
        prepend = MetaspacePreTokenizer::Prepend::kAlways;
      } else if (scheme == "first") {
        prepend = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (scheme == "never") {
        prepend = MetaspacePreTokenizer::Prepend::kNever;
      } else {
        fail("tokenizer.json: unknown Metaspace prepend_scheme '{}'", scheme);
      }
    }
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), prepend, config.value("split", true));
  }
  if (type == "Digits") {
    const bool individual = config.value("individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(Regex(individual ? R"(\p{N})" : R"(\p{N}+)", Regex::Syntax::kRegex),
                                               SplitBehavior::kIsolated, false);
  }
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(Regex(R"(\w+|[^\w\s]+)", Regex::Syntax::kRegex),
                                               SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<SplitPreTokenizer>(Regex(R"(\S+)", Regex::Syntax::kRegex), SplitBehavior::kRemoved, true);
  }
  if (type == "Sequence") {
    const auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) fail("tokenizer.json: Sequence pre_tokenizer needs a 'pretokenizers' array");
    std::vector<std::unique_ptr<PreTokenizer>> stages;
    for (std::size_t i = 0; i < it->size(); ++i) {
      stages.push_back(build((*it)[i], is_last && i + 1 == it->size(), emits_raw_bytes));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(stages));
  }
  fail("tokenizer.json: unsupported pre_tokenizer type '{}'", type);
}

}  // namespace

PreTokenizerBuild make_pre_tokenizer(const json& config) {
  PreTokenizerBuild result;
  if (config.is_null()) return result;
  result.pre_tokenizer = build(config, true, result.emits_raw_bytes);
  return result;
}

}  // namespace tern
