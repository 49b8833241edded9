#include "chat/template_text_filters.h"

#include <fmt/format.h>

#include <algorithm>

#include "chat/python_string.h"
#include "chat/template_builtins.h"

namespace tern::chat {
namespace {

bool flag_argument(const Value& value, bool fallback) { return value.is_undefined() ? fallback : value.truthy(); }

std::u32string code_points_of(const Value& value) { return decode_utf8(value.to_str()); }

// ---- wordwrap: Python's textwrap.wrap(line, width, expand_tabs=False, replace_whitespace=False, ...) ----

bool is_word_char(char32_t c) {
  return c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !is_python_space(c));
}

// textwrap's chunks: runs of whitespace, and words; with break_on_hyphens a word also breaks after a hyphen that
// joins two word characters ("long-term" -> "long-", "term").
std::vector<std::u32string> wrap_chunks(const std::u32string& text, bool break_on_hyphens) {
  std::vector<std::u32string> chunks;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    bool space = is_python_space(text[i]);
    while (j < text.size() && is_python_space(text[j]) == space) {
      ++j;
      if (!space && break_on_hyphens && text[j - 1] == '-' && j >= 2 && is_word_char(text[j - 2]) && j < text.size() &&
          is_word_char(text[j])) {
        break;
      }
    }
    chunks.push_back(text.substr(i, j - i));
    i = j;
  }
  return chunks;
}

bool is_blank(const std::u32string& chunk) {
  return std::all_of(chunk.begin(), chunk.end(), is_python_space);
}

std::vector<std::u32string> wrap_line(const std::u32string& text, size_t width, bool break_long_words, bool break_on_hyphens) {
  std::vector<std::u32string> chunks = wrap_chunks(text, break_on_hyphens);
  std::reverse(chunks.begin(), chunks.end());
  std::vector<std::u32string> lines;
  while (!chunks.empty()) {
    std::vector<std::u32string> line;
    size_t line_len = 0;
    if (is_blank(chunks.back()) && !lines.empty()) chunks.pop_back();  // drop_whitespace at a line's start
    while (!chunks.empty() && line_len + chunks.back().size() <= width) {
      line_len += chunks.back().size();
      line.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && chunks.back().size() > width) {  // textwrap's _handle_long_word
      size_t space_left = width >= 1 ? std::max<size_t>(width > line_len ? width - line_len : 0, 1) : 1;
      if (break_long_words) {
        std::u32string& chunk = chunks.back();
        size_t end = space_left;
        if (break_on_hyphens && chunk.size() > space_left) {
          size_t hyphen = chunk.rfind(U'-', space_left - 1);
          if (hyphen != std::u32string::npos && hyphen > 0 &&
              std::any_of(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(hyphen), [](char32_t c) { return c != '-'; })) {
            end = hyphen + 1;
          }
        }
        line.push_back(chunk.substr(0, end));
        chunk = chunk.substr(end);
      } else if (line.empty()) {
        line.push_back(std::move(chunks.back()));
        chunks.pop_back();
      }
    }
    if (!line.empty() && is_blank(line.back())) line.pop_back();  // drop_whitespace at a line's end
    if (!line.empty()) {
      std::u32string joined;
      for (const auto& chunk : line) joined += chunk;
      lines.push_back(std::move(joined));
    }
  }
  return lines;
}

// ---- striptags ----

std::string html_unescape(const std::string& text) {
  static const std::pair<const char*, const char*> kEntities[] = {
      {"amp", "&"},     {"lt", "<"},       {"gt", ">"},       {"quot", "\""},    {"apos", "'"},    {"nbsp", "\u00a0"},
      {"copy", "©"},    {"reg", "®"},      {"trade", "™"},    {"hellip", "…"},   {"mdash", "—"},   {"ndash", "–"},
      {"laquo", "«"},   {"raquo", "»"},    {"lsquo", "‘"},    {"rsquo", "’"},    {"ldquo", "“"},   {"rdquo", "”"},
      {"bull", "•"},    {"middot", "·"},   {"deg", "°"},      {"euro", "€"},     {"pound", "£"},   {"yen", "¥"},
      {"sect", "§"},    {"para", "¶"},     {"times", "×"},    {"divide", "÷"}};
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    size_t semicolon = text.find(';', i);
    if (semicolon != std::string::npos && semicolon - i <= 32) {
      std::string name = text.substr(i + 1, semicolon - i - 1);
      if (name.size() > 1 && name[0] == '#') {
        bool hex = name[1] == 'x' || name[1] == 'X';
        std::string digits = name.substr(hex ? 2 : 1);
        if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [hex](char c) {
              return hex ? std::isxdigit(static_cast<unsigned char>(c)) != 0 : std::isdigit(static_cast<unsigned char>(c)) != 0;
            }) && digits.size() <= 8) {
          unsigned long code = std::stoul(digits, nullptr, hex ? 16 : 10);
          if (code == 0 || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) code = 0xFFFD;
          out += encode_utf8(std::u32string(1, static_cast<char32_t>(code)));
          i = semicolon;
          continue;
        }
      }
      auto entity = std::find_if(std::begin(kEntities), std::end(kEntities), [&](const auto& e) { return name == e.first; });
      if (entity != std::end(kEntities)) {
        out += entity->second;
        i = semicolon;
        continue;
      }
    }
    out += '&';
  }
  return out;
}

// Removes `open`...`close` spans, each from an opener to the first closer after it, as markupsafe does.
std::string remove_spans(std::string text, const std::string& open, const std::string& close) {
  size_t start = 0;
  while ((start = text.find(open, start)) != std::string::npos) {
    size_t end = text.find(close, start + open.size() - 1);
    if (end == std::string::npos) break;
    text.erase(start, end + close.size() - start);
  }
  return text;
}

// ---- urlencode ----

std::string url_quote(const std::string& text, bool for_query) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_query && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_query && c == ' ') {
      out += '+';
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// ---- pprint: pprint.pformat(value) with width 80, indent 1 and sorted dicts ----

class PrettyPrinter {
 public:
  std::string format(const Value& value) {
    print(value, 0, 0, 1);
    return out_;
  }

 private:
  static constexpr int64_t kWidth = 80;

  static ValueList sorted_entries(const Value& map) {
    ValueList pairs;
    for (const auto& [key, item] : map.as_map().entries()) pairs.push_back(Value::tuple({key, item}));
    std::stable_sort(pairs.begin(), pairs.end(), [](const Value& a, const Value& b) {
      try {
        return value_less(a.as_list()[0], b.as_list()[0]);
      } catch (const EvalError&) {  // pprint orders unorderable keys by type name
        return a.as_list()[0].type_name() < b.as_list()[0].type_name();
      }
    });
    return pairs;
  }

  // repr() with dicts sorted, as pprint's safe repr writes them.
  static std::string repr(const Value& value) {
    if (value.is_map() && !value.is_namespace()) {
      std::string out = "{";
      bool first = true;
      for (const auto& pair : sorted_entries(value)) {
        if (!first) out += ", ";
        first = false;
        out += repr(pair.as_list()[0]) + ": " + repr(pair.as_list()[1]);
      }
      return out + "}";
    }
    if (value.is_list() && !value.is_dict_view()) {
      std::string out = value.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < value.as_list().size(); ++i) out += (i ? ", " : "") + repr(value.as_list()[i]);
      if (value.is_tuple()) return out + (value.as_list().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    return value.repr();
  }

  static int64_t width_of(const std::string& text) { return static_cast<int64_t>(count_code_points(text)); }

  void print(const Value& value, int64_t indent, int64_t allowance, int level) {
    std::string rep = repr(value);
    if (width_of(rep) <= kWidth - indent - allowance) {
      out_ += rep;
      return;
    }
    if (value.is_map() && !value.is_namespace()) {
      out_ += '{';
      ValueList pairs = sorted_entries(value);
      int64_t item_indent = indent + 1;
      for (size_t i = 0; i < pairs.size(); ++i) {
        bool last = i + 1 == pairs.size();
        std::string key = repr(pairs[i].as_list()[0]);
        out_ += key + ": ";
        print(pairs[i].as_list()[1], item_indent + width_of(key) + 2, last ? allowance + 1 : 1, level + 1);
        if (!last) out_ += ",\n" + std::string(static_cast<size_t>(item_indent), ' ');
      }
      out_ += '}';
      return;
    }
    if (value.is_list() && !value.is_dict_view()) {
      bool tuple = value.is_tuple();
      const ValueList& items = value.as_list();
      std::string end = tuple ? (items.size() == 1 ? ",)" : ")") : "]";
      out_ += tuple ? '(' : '[';
      int64_t item_indent = indent + 1;
      for (size_t i = 0; i < items.size(); ++i) {
        bool last = i + 1 == items.size();
        if (i > 0) out_ += ",\n" + std::string(static_cast<size_t>(item_indent), ' ');
        print(items[i], item_indent, last ? allowance + width_of(end) : 1, level + 1);
      }
      out_ += end;
      return;
    }
    if (value.is_string() && !value.as_string().empty()) {
      print_string(value.as_string(), indent, allowance, level);
      return;
    }
    out_ += rep;
  }

  // A long string splits at whitespace into adjacent literals, one per line (in parentheses at the top level).
  void print_string(const std::string& text, int64_t indent, int64_t allowance, int level) {
    std::vector<std::string> lines;
    for (size_t start = 0; start < text.size();) {  // splitlines(keepends=True) on \n
      size_t newline = text.find('\n', start);
      size_t end = newline == std::string::npos ? text.size() : newline + 1;
      lines.push_back(text.substr(start, end - start));
      start = end;
    }
    if (level == 1) {
      indent += 1;
      allowance += 1;
    }
    int64_t max_width = kWidth - indent;
    int64_t max_width_last = max_width;
    std::vector<std::string> chunks;
    std::string rep;
    for (size_t i = 0; i < lines.size(); ++i) {
      rep = python_string_repr(lines[i]);
      if (i + 1 == lines.size()) max_width_last -= allowance;
      if (width_of(rep) <= max_width_last) {
        chunks.push_back(rep);
        continue;
      }
      std::vector<std::string> parts;  // re.findall(r'\S*\s*', line) without the final empty match
      std::u32string line = decode_utf8(lines[i]);
      for (size_t p = 0; p < line.size();) {
        size_t q = p;
        while (q < line.size() && !is_python_space(line[q])) ++q;
        while (q < line.size() && is_python_space(line[q])) ++q;
        parts.push_back(encode_utf8(line.substr(p, q - p)));
        p = q;
      }
      int64_t part_width = max_width;
      std::string current;
      for (size_t j = 0; j < parts.size(); ++j) {
        std::string candidate = current + parts[j];
        if (j + 1 == parts.size() && i + 1 == lines.size()) part_width -= allowance;
        if (width_of(python_string_repr(candidate)) > part_width) {
          if (!current.empty()) chunks.push_back(python_string_repr(current));
          current = parts[j];
        } else {
          current = candidate;
        }
      }
      if (!current.empty()) chunks.push_back(python_string_repr(current));
    }
    if (chunks.size() == 1) {
      out_ += rep;
      return;
    }
    if (level == 1) out_ += '(';
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i > 0) out_ += "\n" + std::string(static_cast<size_t>(indent), ' ');
      out_ += chunks[i];
    }
    if (level == 1) out_ += ')';
  }

  std::string out_;
};

}  // namespace

Value truncate_filter(const Value& input, const CallArgs& args) {
  std::u32string text = code_points_of(input);
  int64_t length = int_argument(args.get(0, "length"), "truncate() length", 255);
  bool killwords = flag_argument(args.get(1, "killwords"), false);
  Value end_value = args.get(2, "end");
  std::u32string end = end_value.is_undefined() ? U"..." : decode_utf8(end_value.to_str());
  int64_t leeway = int_argument(args.get(3, "leeway"), "truncate() leeway", 5);
  auto end_len = static_cast<int64_t>(end.size());
  if (length < end_len) throw EvalError(fmt::format("expected length >= {}, got {}", end_len, length));
  if (leeway < 0) throw EvalError(fmt::format("expected leeway >= 0, got {}", leeway));
  if (static_cast<int64_t>(text.size()) <= length + leeway) return Value(encode_utf8(text));
  std::u32string kept = text.substr(0, static_cast<size_t>(length - end_len));
  if (!killwords) {
    size_t space = kept.rfind(U' ');
    if (space != std::u32string::npos) kept.resize(space);
  }
  return Value(encode_utf8(kept + end));
}

Value wordwrap_filter(const Value& input, const CallArgs& args) {
  int64_t width = int_argument(args.get(0, "width"), "wordwrap() width", 79);
  if (width <= 0) throw EvalError(fmt::format("invalid width {} (must be > 0)", width));
  bool break_long_words = flag_argument(args.get(1, "break_long_words"), true);
  Value wrapstring_value = args.get(2, "wrapstring");
  std::string wrapstring = wrapstring_value.is_undefined() || wrapstring_value.is_none() ? "\n" : wrapstring_value.to_str();
  bool break_on_hyphens = flag_argument(args.get(3, "break_on_hyphens"), true);
  std::vector<std::string> paragraphs = python_split(input.to_str(), std::string("\n"), -1);
  if (!paragraphs.empty() && paragraphs.back().empty()) paragraphs.pop_back();  // splitlines() drops a final ""
  std::string out;
  for (size_t i = 0; i < paragraphs.size(); ++i) {
    if (i > 0) out += wrapstring;
    auto lines = wrap_line(decode_utf8(paragraphs[i]), static_cast<size_t>(width), break_long_words, break_on_hyphens);
    for (size_t j = 0; j < lines.size(); ++j) out += (j ? wrapstring : "") + encode_utf8(lines[j]);
  }
  return Value(std::move(out));
}

Value striptags_filter(const Value& input, const CallArgs&) {
  std::string text = remove_spans(remove_spans(input.to_str(), "<!--", "-->"), "<", ">");
  std::string collapsed;
  for (const auto& word : python_split(text, std::nullopt, -1)) collapsed += (collapsed.empty() ? "" : " ") + word;
  return Value(html_unescape(collapsed));
}

Value urlencode_filter(const Value& input, const CallArgs&) {
  if (input.is_string() || !(input.is_list() || input.is_map())) return Value(url_quote(input.to_str(), false));
  ValueList pairs;
  if (input.is_map()) {
    for (const auto& [key, value] : input.as_map().entries()) pairs.push_back(Value::tuple({key, value}));
  } else {
    pairs = input.as_list();
  }
  std::string out;
  for (const auto& pair : pairs) {
    ValueList kv = iterate_value(pair);
    if (kv.size() != 2) throw EvalError(fmt::format("urlencode() needs (key, value) pairs, got {} items", kv.size()));
    if (!out.empty()) out += '&';
    out += url_quote(kv[0].to_str(), true) + "=" + url_quote(kv[1].to_str(), true);
  }
  return Value(std::move(out));
}

Value pprint_filter(const Value& input, const CallArgs&) { return Value(PrettyPrinter().format(input)); }

}  // namespace tern::chat
