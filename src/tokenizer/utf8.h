#pragma once
// UTF-8 helpers shared by the tokenizer stages. Hugging Face `tokenizers` works on Rust strings, so every
// conversion from bytes to text here follows Rust's rules (e.g. String::from_utf8_lossy).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tern::utf8 {

// Length in bytes of the valid UTF-8 sequence starting at text[pos], or 0 if the bytes there are not one.
std::size_t valid_sequence_len(std::string_view text, std::size_t pos);

// Byte offset of the first invalid sequence, or nullopt if the whole text is valid UTF-8.
std::optional<std::size_t> first_invalid_offset(std::string_view text);

// Replaces each maximal invalid subsequence with U+FFFD, exactly as Rust's String::from_utf8_lossy does.
std::string lossy(std::string_view bytes);

// Appends the UTF-8 encoding of one code point.
void append_codepoint(std::string& out, char32_t codepoint);

// Decodes the code point at text[pos] (which must be valid UTF-8) and advances pos past it.
char32_t next_codepoint(std::string_view text, std::size_t& pos);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace tern::utf8
