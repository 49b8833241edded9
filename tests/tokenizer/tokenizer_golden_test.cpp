// Encodes and decodes the Hugging Face `tokenizers` goldens (tokenizers/*/encode_golden.json) with the shipped
// tokenizer.json files and with the copies inside the model fixtures, and checks the Llama 2 model prompts
// (BOS + ids) from transformers.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

std::vector<GoldenCase> read_golden(const std::string& name) {
  const auto golden = testing::read_json(testing::fixtures_dir() / "tokenizers" / name / "encode_golden.json");
  std::vector<GoldenCase> cases;
  for (const auto& c : golden.at("cases")) {
    cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(),
                     c.at("decoded").get<std::string>()});
  }
  return cases;
}

const Tokenizer& cached_tokenizer(const std::filesystem::path& dir) {
  static std::map<std::filesystem::path, Tokenizer> loaded;
  auto it = loaded.find(dir);
  if (it == loaded.end()) it = loaded.emplace(dir, Tokenizer::load(dir)).first;
  return it->second;
}

struct GoldenParam {
  std::string tokenizer_dir;  // relative to the fixtures directory
  std::string golden;         // tokenizers/<golden>/encode_golden.json
};

class TokenizerGolden : public ::testing::TestWithParam<GoldenParam> {
 protected:
  const Tokenizer& tokenizer() const { return cached_tokenizer(testing::fixtures_dir() / GetParam().tokenizer_dir); }
};

TEST_P(TokenizerGolden, EncodeMatchesHuggingFace) {
  const auto cases = read_golden(GetParam().golden);
  ASSERT_GE(cases.size(), 100u);
  int failures = 0;
  for (const auto& c : cases) {
    const auto ids = tokenizer().encode(c.text, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, c.ids) << "text: " << nlohmann::json(c.text).dump();
    failures += ids != c.ids;
    if (failures > 5) break;
  }
}

TEST_P(TokenizerGolden, DecodeMatchesHuggingFace) {
  for (const auto& c : read_golden(GetParam().golden)) {
    EXPECT_EQ(tokenizer().decode(c.ids, /*skip_special_tokens=*/false), c.decoded)
        << "ids for text: " << nlohmann::json(c.text).dump();
  }
}

TEST_P(TokenizerGolden, StreamingDetokenizerEqualsFullDecode) {
  for (const auto& c : read_golden(GetParam().golden)) {
    for (bool skip_special : {false, true}) {
      IncrementalDetokenizer stream(tokenizer(), skip_special);
      std::string streamed;
      for (int32_t id : c.ids) {
        const std::string piece = stream.push(id);
        EXPECT_FALSE(piece.ends_with("\xEF\xBF\xBD")) << "emitted an incomplete character";
        streamed += piece;
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, tokenizer().decode(c.ids, skip_special)) << "text: " << nlohmann::json(c.text).dump();
    }
  }
}

TEST_P(TokenizerGolden, EncodeBatchEqualsEncode) {
  std::vector<std::string> texts;
  for (const auto& c : read_golden(GetParam().golden)) texts.push_back(c.text);
  const auto batch = tokenizer().encode_batch(texts, false, 4);
  ASSERT_EQ(batch.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tokenizer().encode(texts[i], false));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TokenizerGolden,
    ::testing::Values(GoldenParam{"tokenizers/qwen3", "qwen3"}, GoldenParam{"tokenizers/llama3", "llama3"},
                      GoldenParam{"tokenizers/llama2", "llama2"}, GoldenParam{"models/qwen3-chat-tiny", "qwen3"},
                      GoldenParam{"models/llama3-chat-tiny", "llama3"}, GoldenParam{"models/tern-py-13m", "llama2"}),
    [](const auto& info) {
      std::string name = info.param.tokenizer_dir;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(TokenizerGoldenModels, Llama2PromptsWithBos) {
  const auto dir = testing::fixtures_dir() / "models" / "tern-py-13m";
  const auto golden = testing::read_json(dir / "golden.json");
  const Tokenizer& tokenizer = cached_tokenizer(dir);
  const auto& texts = golden.at("prompts_text");
  const auto& prompts = golden.at("prompts");
  ASSERT_EQ(texts.size(), prompts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tokenizer.encode(texts[i].get<std::string>(), true), prompts[i].get<std::vector<int32_t>>());
  }
  EXPECT_EQ(tokenizer.bos_id(), 1);
  EXPECT_EQ(tokenizer.eos_id(), 2);
}

TEST(TokenizerGoldenModels, SpecialTokenIds) {
  const Tokenizer& qwen = cached_tokenizer(testing::fixtures_dir() / "tokenizers" / "qwen3");
  EXPECT_EQ(qwen.bos_id(), std::nullopt);
  EXPECT_EQ(qwen.eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen.eos_id(), 151645);
  EXPECT_TRUE(qwen.is_special(151645));
  EXPECT_FALSE(qwen.is_special(9707));
  EXPECT_EQ(qwen.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_TRUE(qwen.special_prefix_ids().empty());

  const Tokenizer& llama3 = cached_tokenizer(testing::fixtures_dir() / "tokenizers" / "llama3");
  EXPECT_EQ(llama3.bos_id(), 128000);
  EXPECT_EQ(llama3.eos_id(), 128001);
  EXPECT_EQ(llama3.vocab_size(), 128256);
}

}  // namespace
}  // namespace tern
