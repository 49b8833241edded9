#pragma once
// Reads a Hugging Face tokenizer.json. The BPE vocabulary and merges (hundreds of thousands of entries) are
// streamed straight into vectors by a SAX pass instead of becoming a JSON tree, which is what keeps loading the
// 11 MB Qwen3 file well under the time a DOM parse takes; everything else becomes an ordinary nlohmann::json.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"

namespace tern {

struct TokenizerJson {
  nlohmann::json document;  // the whole file except model.vocab (when an object) and model.merges
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  bool has_vocab_object = false;
};

// `source` names the file in error messages.
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source);

std::string read_file(const std::filesystem::path& path);

// Field helpers for the parts of tokenizer.json; errors name the part (`where`) and the field.
std::string required_string(const nlohmann::json& config, const char* field, std::string_view where);
// A {"String": literal} or {"Regex": pattern} object, as Split, Replace and friends use.
Regex make_pattern(const nlohmann::json& pattern, std::string_view where);

}  // namespace tern
