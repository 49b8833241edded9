// Small hand-written tokenizer.json files: each pipeline stage against Hugging Face's documented behaviour, and
// malformed files, which must fail with tern::Error naming the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using json = nlohmann::json;

// A byte-level BPE over "a", "b", "c", "ab", "abc" with one added special token.
json tiny_byte_level() {
  json vocab = json::object();
  const std::vector<std::string> tokens = {"a", "b", "c", "ab", "abc", "\xC4\xA0", "\xC4\xA0" "a"};
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return json{{"version", "1.0"},
              {"added_tokens", json::array({json{{"id", 7}, {"content", "<|end|>"}, {"special", true}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", nullptr},
              {"decoder", json{{"type", "ByteLevel"}}},
              {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", json::array({"ab", "c"}), "\xC4\xA0 a"})}}}};
}

std::string error_of(const std::string& tokenizer_json, const std::string& config = "") {
  try {
    Tokenizer::from_json(tokenizer_json, config, "test");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerLoading, TinyByteLevelModel) {
  const Tokenizer tokenizer = Tokenizer::from_json(tiny_byte_level().dump(), "", "test");
  EXPECT_EQ(tokenizer.encode("abc ab a<|end|>", false), (std::vector<int32_t>{4, 5, 3, 6, 7}));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{4, 5, 3, 6, 7}, true), "abc ab a");
  EXPECT_EQ(tokenizer.vocab_size(), 8);
  EXPECT_EQ(tokenizer.token_bytes(6), " a");
}

TEST(TokenizerLoading, TemplateProcessingAndConfigFlags) {
  json file = tiny_byte_level();
  file["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [7], "tokens": ["<|end|>"]}}})");
  EXPECT_EQ(Tokenizer::from_json(file.dump(), "", "t").encode("a", true), (std::vector<int32_t>{7, 0}));
  const std::string config = R"({"bos_token": {"content": "<|end|>"}, "eos_token": "<|end|>",
                                 "add_bos_token": false, "add_eos_token": true})";
  const Tokenizer flagged = Tokenizer::from_json(file.dump(), config, "t");
  EXPECT_EQ(flagged.encode("a", true), (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(flagged.bos_id(), 7);
}

TEST(TokenizerLoading, MalformedFilesThrow) {
  EXPECT_NE(error_of("{not json"), "");
  EXPECT_NE(error_of("[1, 2]"), "");
  EXPECT_NE(error_of(""), "");
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})").find("Unigram"), std::string::npos);

  json file = tiny_byte_level();
  file["model"]["merges"].push_back("a zzz");
  EXPECT_NE(error_of(file.dump()).find("zzz"), std::string::npos);

  file = tiny_byte_level();
  file["model"]["vocab"]["x"] = "not a number";
  EXPECT_NE(error_of(file.dump()).find("model.vocab"), std::string::npos);

  file = tiny_byte_level();
  file["pre_tokenizer"] = json{{"type", "Split"}, {"pattern", json{{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(error_of(file.dump()).find("regex"), std::string::npos);

  file = tiny_byte_level();
  file["decoder"] = json{{"type", "NoSuchDecoder"}};
  EXPECT_NE(error_of(file.dump()).find("NoSuchDecoder"), std::string::npos);

  file = tiny_byte_level();
  file["added_tokens"] = json::array({json{{"content", "x"}}});
  EXPECT_NE(error_of(file.dump()).find("added_tokens"), std::string::npos);

  file = tiny_byte_level();
  file["model"].erase("vocab");
  EXPECT_NE(error_of(file.dump()).find("vocab"), std::string::npos);

  EXPECT_NE(error_of(tiny_byte_level().dump(), "{broken").find("tokenizer_config.json"), std::string::npos);
  EXPECT_NE(error_of(tiny_byte_level().dump(), R"({"eos_token": "<nope>"})").find("<nope>"), std::string::npos);

  // Truncations of a real file at many points must all fail cleanly.
  const std::string real = tiny_byte_level().dump();
  for (std::size_t cut = 0; cut < real.size(); cut += 7) EXPECT_NE(error_of(real.substr(0, cut)), "");
}

TEST(TokenizerLoading, JsonEscapesAndLimits) {
  // Vocabulary keys written with \u escapes (a surrogate pair for the emoji) read as the characters they encode.
  const std::string text = R"({"model": {"type": "BPE", "vocab": {"\u00e9": 0, "\ud83d\ude00": 1, "a\"\\\/\n": 2},
                               "merges": []}, "decoder": null})";
  const Tokenizer tokenizer = Tokenizer::from_json(text, "", "t");
  EXPECT_EQ(tokenizer.token_to_id("\xC3\xA9"), 0);
  EXPECT_EQ(tokenizer.token_to_id("\xF0\x9F\x98\x80"), 1);
  EXPECT_EQ(tokenizer.token_to_id("a\"\\/\n"), 2);
  EXPECT_NE(error_of(R"({"model": {"vocab": {"\ud83d": 0}}})").find("surrogate"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '[')).find("nesting"), std::string::npos);
  EXPECT_NE(error_of("{\"a\": \"\xFF\"}").find("UTF-8"), std::string::npos);
  EXPECT_NE(error_of(R"({"a": 01})").find("leading zero"), std::string::npos);
}

TEST(TokenizerLoading, MissingDirectoryOrFile) {
  const auto dir = std::filesystem::temp_directory_path() / "tern_tokenizer_missing_test";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "tokenizer.json");
  try {
    Tokenizer::load(dir);
    FAIL() << "expected tern::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos);
  }
  std::ofstream(dir / "tokenizer.json") << "{\"model\": 3";
  EXPECT_THROW(Tokenizer::load(dir), Error);
  std::filesystem::remove_all(dir);
}

TEST(TokenizerLoading, SentencePieceStyleStages) {
  // Metaspace pre-tokenizer and decoder, byte fallback, unk fusing.
  json vocab = json::object();
  const std::vector<std::string> tokens = {"<unk>", "\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi", "<0xC3>", "<0xA9>"};
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  const json file = {
      {"normalizer", nullptr},
      {"pre_tokenizer", json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}}},
      {"decoder", json{{"type", "Sequence"}, {"decoders", json::array({json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}},
                                                                     json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}}})}}},
      {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
                     {"merges", json::array({"\xE2\x96\x81 h", "\xE2\x96\x81h i"})}}}};
  const Tokenizer tokenizer = Tokenizer::from_json(file.dump(), "", "t");
  // "é" falls back to its two bytes; "€" has no byte tokens here, so it becomes <unk>, fused with its neighbour.
  EXPECT_EQ(tokenizer.encode("hi hé€€", false), (std::vector<int32_t>{5, 4, 6, 7, 0}));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{5, 4, 6, 7}, false), "hi hé");
  EXPECT_EQ(tokenizer.token_bytes(6), "\xC3");
}

}  // namespace
}  // namespace tern
