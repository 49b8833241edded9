#pragma once
// Decoders from tokenizer.json ("decoder"): they turn token strings back into text. Each works on the whole list
// of token strings, like Hugging Face's decode_chain, because some rules depend on position (Strip, Metaspace's
// first token) or span tokens (ByteLevel's UTF-8 repair, ByteFallback's byte runs). Supported: ByteLevel,
// Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tern {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // Rewrites one token string into the bytes it stands for, leaving out the rules that depend on the token's
  // position or on UTF-8 validity (what a grammar engine needs to know per token).
  virtual void to_bytes(std::string& token) const = 0;
};

// Returns nullptr for a JSON null (tokens are then joined with spaces, as Hugging Face does).
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config);

}  // namespace tern
