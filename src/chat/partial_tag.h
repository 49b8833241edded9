#pragma once
// Streaming parsers must not emit the first bytes of a tag ("<tool_" of "<tool_call>") before they know whether
// the tag completes; they hold back the longest end of the text that could still grow into one.
#include <initializer_list>
#include <string_view>

namespace tern::chat {

// Length of the longest suffix of `text` that is a proper prefix of one of `tags`.
size_t partial_tag_suffix_len(std::string_view text, std::initializer_list<std::string_view> tags);

}  // namespace tern::chat
