#pragma once
// Python str semantics over UTF-8 text: Jinja templates call str methods (strip, split, title, slicing by code
// point...), and the rendered prompt must match Python's answers byte for byte.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tern::chat {

std::u32string decode_utf8(std::string_view text);  // invalid bytes become U+FFFD
std::string encode_utf8(std::u32string_view code_points);
size_t count_code_points(std::string_view text);

bool is_python_space(char32_t c);

// str.strip / lstrip / rstrip: `chars` absent strips whitespace.
std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit): without `sep` splits on runs of whitespace and drops empty parts; maxsplit < 0 is "all".
std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit);
std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                       int64_t maxsplit);
std::string python_replace(std::string_view text, std::string_view old_part, std::string_view new_part,
                           int64_t count);
std::string python_upper(std::string_view text);
std::string python_lower(std::string_view text);
std::string python_casefold(std::string_view text);
std::string python_swapcase(std::string_view text);
std::string python_capitalize(std::string_view text);
std::string python_str_title(std::string_view text);  // str.title()
std::string jinja_title(std::string_view text);        // the `title` filter: capitalizes after spaces and brackets
// str.ljust / rjust / center: `text` padded with `fill` to `width` code points.
enum class PadAlign { kLeft, kRight, kCenter };  // where the text goes
std::string python_pad(std::string_view text, int64_t width, char32_t fill, PadAlign align);
std::string python_zfill(std::string_view text, int64_t width);
// str.find / rfind, answered in code points (Python indexes strings by code point); -1 when absent.
int64_t python_find(std::string_view text, std::string_view part, bool from_right);
std::string python_string_repr(std::string_view text);  // 'text' with Python's quoting and escapes

}  // namespace tern::chat
