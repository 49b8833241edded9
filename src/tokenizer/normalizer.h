#pragma once
// Normalizers from tokenizer.json ("normalizer"): they rewrite the text of each piece between added tokens
// before pre-tokenization. Supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tern {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Returns nullptr for a JSON null. Throws tern::Error naming the unsupported or malformed entry.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config);

}  // namespace tern
