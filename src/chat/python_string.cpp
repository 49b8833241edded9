#include "chat/python_string.h"

#include "chat/special_casing.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace tern::chat {

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t pos = 0;
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  while (pos < size) {
    utf8proc_int32_t code_point = 0;
    utf8proc_ssize_t len = utf8proc_iterate(bytes + pos, size - pos, &code_point);
    if (len <= 0) {
      out.push_back(0xFFFD);
      ++pos;
    } else {
      out.push_back(static_cast<char32_t>(code_point));
      pos += len;
    }
  }
  return out;
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  utf8proc_uint8_t buffer[4];
  for (char32_t c : code_points) {
    utf8proc_ssize_t len = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buffer);
    out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(len));
  }
  return out;
}

size_t count_code_points(std::string_view text) {
  size_t count = 0;
  for (unsigned char byte : text) count += (byte & 0xC0) != 0x80;
  return count;
}

bool is_python_space(char32_t c) {
  if ((c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0) return true;
  if (c < 0x80) return false;
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL || category == UTF8PROC_CATEGORY_ZP;
}

std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string code_points = decode_utf8(text);
  std::u32string strip_set = chars ? decode_utf8(*chars) : std::u32string();
  auto strips = [&](char32_t c) {
    return chars ? strip_set.find(c) != std::u32string::npos : is_python_space(c);
  };
  size_t begin = 0;
  size_t end = code_points.size();
  if (left) while (begin < end && strips(code_points[begin])) ++begin;
  if (right) while (end > begin && strips(code_points[end - 1])) --end;
  return encode_utf8(std::u32string_view(code_points).substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_on_whitespace(std::string_view text, int64_t maxsplit, bool from_right) {
  std::u32string code_points = decode_utf8(text);
  std::vector<std::u32string> parts;
  if (!from_right) {
    size_t pos = 0;
    while (true) {
      while (pos < code_points.size() && is_python_space(code_points[pos])) ++pos;
      if (pos == code_points.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = code_points.size();
        while (end > pos && is_python_space(code_points[end - 1])) --end;
        parts.push_back(code_points.substr(pos, end - pos));
        break;
      }
      size_t end = pos;
      while (end < code_points.size() && !is_python_space(code_points[end])) ++end;
      parts.push_back(code_points.substr(pos, end - pos));
      pos = end;
    }
  } else {
    size_t pos = code_points.size();
    while (true) {
      while (pos > 0 && is_python_space(code_points[pos - 1])) --pos;
      if (pos == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t begin = 0;
        while (begin < pos && is_python_space(code_points[begin])) ++begin;
        parts.push_back(code_points.substr(begin, pos - begin));
        break;
      }
      size_t begin = pos;
      while (begin > 0 && !is_python_space(code_points[begin - 1])) --begin;
      parts.push_back(code_points.substr(begin, pos - begin));
      pos = begin;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<std::string> out;
  for (const auto& part : parts) out.push_back(encode_utf8(part));
  return out;
}

}  // namespace

std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit) {
  if (!sep) return split_on_whitespace(text, maxsplit, false);
  if (sep->empty()) throw std::invalid_argument("empty separator");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t found = text.find(*sep, pos);
    if (found == std::string_view::npos) break;
    parts.emplace_back(text.substr(pos, found - pos));
    pos = found + sep->size();
  }
  parts.emplace_back(text.substr(pos));
  return parts;
}

std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                       int64_t maxsplit) {
  if (!sep) return split_on_whitespace(text, maxsplit, true);
  if (sep->empty()) throw std::invalid_argument("empty separator");
  std::vector<std::string> parts;
  size_t end = text.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t found = text.rfind(*sep, end - sep->size());
    if (found == std::string_view::npos) break;
    parts.emplace_back(text.substr(found + sep->size(), end - found - sep->size()));
    end = found;
  }
  parts.emplace_back(text.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string python_replace(std::string_view text, std::string_view old_part, std::string_view new_part,
                           int64_t count) {
  std::string out;
  if (old_part.empty()) {
    // Python inserts `new_part` between every code point and at both ends.
    std::u32string code_points = decode_utf8(text);
    int64_t done = 0;
    for (char32_t c : code_points) {
      if (count < 0 || done < count) {
        out += new_part;
        ++done;
      }
      out += encode_utf8(std::u32string(1, c));
    }
    if (count < 0 || done < count) out += new_part;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = text.find(old_part, pos);
    if (found == std::string_view::npos) break;
    out += text.substr(pos, found - pos);
    out += new_part;
    pos = found + old_part.size();
    ++done;
  }
  out += text.substr(pos);
  return out;
}

namespace {

char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t to_title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

bool is_cased(char32_t c) {
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

// Appends the full case mapping of `c`: the special one where Unicode has one ('ß' -> "SS"), else the simple one.
void append_cased(std::u32string& out, char32_t c, std::u32string_view (*special)(char32_t), char32_t (*simple)(char32_t)) {
  std::u32string_view full = special(c);
  if (full.empty()) {
    out += simple(c);
  } else {
    out += full;
  }
}

}  // namespace

std::string python_upper(std::string_view text) {
  std::u32string out;
  for (char32_t c : decode_utf8(text)) append_cased(out, c, special_upper, to_upper);
  return encode_utf8(out);
}

std::string python_lower(std::string_view text) {
  std::u32string out;
  for (char32_t c : decode_utf8(text)) append_cased(out, c, special_lower, to_lower);
  return encode_utf8(out);
}

std::string python_casefold(std::string_view text) {
  utf8proc_uint8_t* folded = nullptr;
  std::string valid = encode_utf8(decode_utf8(text));
  utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                                      static_cast<utf8proc_ssize_t>(valid.size()), &folded, UTF8PROC_CASEFOLD);
  if (len < 0) return python_lower(text);  // unreachable for valid UTF-8
  std::string out(reinterpret_cast<const char*>(folded), static_cast<size_t>(len));
  std::free(folded);
  return out;
}

std::string python_swapcase(std::string_view text) {
  std::u32string out;
  for (char32_t c : decode_utf8(text)) {
    auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LT) {
      append_cased(out, c, special_lower, to_lower);
    } else if (category == UTF8PROC_CATEGORY_LL) {
      append_cased(out, c, special_upper, to_upper);
    } else {
      out += c;
    }
  }
  return encode_utf8(out);
}

std::string python_capitalize(std::string_view text) {
  std::u32string out;
  bool first = true;
  for (char32_t c : decode_utf8(text)) {
    if (first) {
      append_cased(out, c, special_title, to_title);
    } else {
      append_cased(out, c, special_lower, to_lower);
    }
    first = false;
  }
  return encode_utf8(out);
}

std::string python_str_title(std::string_view text) {
  std::u32string out;
  bool previous_cased = false;
  for (char32_t c : decode_utf8(text)) {
    bool cased = is_cased(c);
    if (previous_cased) {
      append_cased(out, c, special_lower, to_lower);
    } else {
      append_cased(out, c, special_title, to_title);
    }
    previous_cased = cased;
  }
  return encode_utf8(out);
}

std::string jinja_title(std::string_view text) {
  // Jinja splits on runs of whitespace, hyphens and brackets; each word gets an upper first letter, lower rest.
  auto is_boundary = [](char32_t c) {
    return is_python_space(c) || c == '-' || c == '[' || c == ']' || c == '(' || c == ')' || c == '{' || c == '}';
  };
  std::u32string out;
  bool word_start = true;
  for (char32_t c : decode_utf8(text)) {
    if (is_boundary(c)) {
      word_start = true;
      out += c;
      continue;
    }
    if (word_start) {
      append_cased(out, c, special_upper, to_upper);
    } else {
      append_cased(out, c, special_lower, to_lower);
    }
    word_start = false;
  }
  return encode_utf8(out);
}

std::string python_pad(std::string_view text, int64_t width, char32_t fill, PadAlign align) {
  auto len = static_cast<int64_t>(count_code_points(text));
  if (width <= len) return std::string(text);
  auto total = static_cast<size_t>(width - len);
  size_t left = 0;
  if (align == PadAlign::kRight) left = total;
  // str.center puts the odd space on the left when the width is odd (CPython's pad(): left = total/2 + (total & width & 1)).
  if (align == PadAlign::kCenter) left = total / 2 + (total & static_cast<size_t>(width) & 1);
  std::string fill_text = encode_utf8(std::u32string(1, fill));
  std::string out;
  for (size_t i = 0; i < left; ++i) out += fill_text;
  out += text;
  for (size_t i = left; i < total; ++i) out += fill_text;
  return out;
}

std::string python_zfill(std::string_view text, int64_t width) {
  auto len = static_cast<int64_t>(count_code_points(text));
  if (width <= len) return std::string(text);
  std::string zeros(static_cast<size_t>(width - len), '0');
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) return std::string(1, text[0]) + zeros + std::string(text.substr(1));
  return zeros + std::string(text);
}

int64_t python_find(std::string_view text, std::string_view part, bool from_right) {
  size_t found = from_right ? text.rfind(part) : text.find(part);
  if (found == std::string_view::npos) return -1;
  return static_cast<int64_t>(count_code_points(text.substr(0, found)));
}

std::string python_string_repr(std::string_view text) {
  bool has_single = text.find('\'') != std::string_view::npos;
  bool has_double = text.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(text)) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<char32_t>(quote)) {
          out += '\\';
          out += quote;
        } else if (c < 0x20 || c == 0x7F) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += encode_utf8(std::u32string(1, c));
        }
    }
  }
  out += quote;
  return out;
}

}  // namespace tern::chat
