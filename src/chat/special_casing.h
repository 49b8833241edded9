#pragma once
// Unicode's unconditional special casing (SpecialCasing.txt): the code points whose upper, lower or title case is
// more than one code point ('ß'.upper() is 'SS'), which the one-to-one mappings of utf8proc leave unchanged.
#include <string_view>

namespace tern::chat {

// The full mapping of `c`, or an empty view where the simple one-to-one mapping applies.
std::u32string_view special_upper(char32_t c);
std::u32string_view special_lower(char32_t c);
std::u32string_view special_title(char32_t c);

}  // namespace tern::chat
