#pragma once
// GPT-2's byte-level alphabet: every byte is shown as one printable Unicode character, so that a vocabulary of
// strings can hold arbitrary bytes. Printable Latin-1 bytes map to themselves; the rest to U+0100 and up.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace tern::byte_level {

// The UTF-8 encoding of the character that stands for each byte.
const std::array<std::string, 256>& byte_to_char();

// Appends the byte-level characters for raw bytes (what the ByteLevel pre-tokenizer does to a piece).
void encode(std::string_view bytes, std::string& out);

// Maps byte-level characters back to bytes; nullopt if some character is outside the alphabet
// (Hugging Face then keeps the token's own UTF-8 bytes).
std::optional<std::string> decode(std::string_view chars);

}  // namespace tern::byte_level
