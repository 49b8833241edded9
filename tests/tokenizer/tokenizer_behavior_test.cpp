// Properties that hold independently of any golden file: round trips, added tokens inside text, token bytes,
// streaming on random input, thread safety.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tern {
namespace {

const Tokenizer& qwen3() {
  static const Tokenizer tokenizer = Tokenizer::load(testing::fixtures_dir() / "tokenizers" / "qwen3");
  return tokenizer;
}
const Tokenizer& llama3() {
  static const Tokenizer tokenizer = Tokenizer::load(testing::fixtures_dir() / "tokenizers" / "llama3");
  return tokenizer;
}
const Tokenizer& llama2() {
  static const Tokenizer tokenizer = Tokenizer::load(testing::fixtures_dir() / "tokenizers" / "llama2");
  return tokenizer;
}

// Random valid UTF-8 drawn from ASCII, Latin, CJK, emoji, combining marks and whitespace, so that NFC would
// change nothing for the ranges used with NFC tokenizers (U+2000 and U+2001 would: NFC maps them to U+2002/3).
std::string random_text(std::mt19937& rng, std::size_t num_chars, bool allow_combining) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0A}, {0xA0, 0xFF}, {0x391, 0x3C9}, {0x410, 0x44F}, {0x4E00, 0x4FFF},
      {0x3041, 0x3096}, {0x1F600, 0x1F64F}, {0x1F300, 0x1F5FF}, {0x2002, 0x200D}, {0xE000, 0xE0FF}};
  std::string text;
  for (std::size_t i = 0; i < num_chars; ++i) {
    const auto& [low, high] = ranges[std::uniform_int_distribution<std::size_t>(0, ranges.size() - 1)(rng)];
    utf8::append_codepoint(text, std::uniform_int_distribution<char32_t>(low, high)(rng));
    if (allow_combining && rng() % 13 == 0) utf8::append_codepoint(text, 0x301);
  }
  return text;
}

std::string concat_token_bytes(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::string bytes;
  for (int32_t id : ids) bytes += tokenizer.token_bytes(id);
  return bytes;
}

TEST(TokenizerRoundTrip, ByteLevelRandomUnicode) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    // Qwen3 normalizes to NFC, so its inputs avoid combining marks (NFC would legitimately change them).
    const std::string text = random_text(rng, 1 + rng() % 60, false);
    for (const Tokenizer* tokenizer : {&qwen3(), &llama3()}) {
      const auto ids = tokenizer->encode(text, false);
      ASSERT_EQ(tokenizer->decode(ids, false), text);
      ASSERT_EQ(concat_token_bytes(*tokenizer, ids), text);
    }
    const auto ids = llama3().encode(random_text(rng, 40, true), false);
    EXPECT_FALSE(ids.empty());
  }
}

TEST(TokenizerRoundTrip, ByteLevelRandomBytesThatAreValidUtf8) {
  std::mt19937 rng(99);
  int tested = 0;
  for (int i = 0; i < 3000 && tested < 300; ++i) {
    std::string bytes(1 + rng() % 24, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    if (utf8::first_invalid_offset(bytes)) {
      EXPECT_THROW(llama3().encode(bytes, false), Error);
      continue;
    }
    ++tested;
    EXPECT_EQ(llama3().decode(llama3().encode(bytes, false), false), bytes);
  }
  EXPECT_GT(tested, 20);
}

TEST(TokenizerRoundTrip, SentencePieceRandomText) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    // Llama 2 strips one leading space on decode (the one its normalizer prepends), so inputs start with a letter.
    const std::string text = "x" + random_text(rng, rng() % 50, true);
    const auto ids = llama2().encode(text, false);
    ASSERT_EQ(llama2().decode(ids, false), text);
    // Each token's bytes, concatenated, give the normalized text: the prepended "▁" is a space.
    ASSERT_EQ(concat_token_bytes(llama2(), ids), " " + text);
  }
}

TEST(TokenizerRoundTrip, StreamingOnRandomText) {
  std::mt19937 rng(42);
  for (int i = 0; i < 100; ++i) {
    const std::string text = random_text(rng, 1 + rng() % 40, true);
    for (const Tokenizer* tokenizer : {&qwen3(), &llama3(), &llama2()}) {
      const auto ids = tokenizer->encode(text, true);
      IncrementalDetokenizer stream(*tokenizer);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      ASSERT_EQ(streamed, tokenizer->decode(ids, true));
    }
  }
}

TEST(TokenizerEdgeCases, EmptyString) {
  for (const Tokenizer* tokenizer : {&qwen3(), &llama3(), &llama2()}) {
    EXPECT_TRUE(tokenizer->encode("", false).empty());
    EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{}, false), "");
    IncrementalDetokenizer stream(*tokenizer);
    EXPECT_EQ(stream.flush(), "");
  }
  EXPECT_EQ(llama2().encode("", true), std::vector<int32_t>{1});
}

TEST(TokenizerEdgeCases, AddedTokensInsideText) {
  const auto ids = qwen3().encode("<|im_start|>user\nhi<|im_end|><think>x</think>", false);
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 151645), ids.end());
  EXPECT_NE(std::find(ids.begin(), ids.end(), *qwen3().token_to_id("<think>")), ids.end());
  EXPECT_EQ(qwen3().decode(ids, false), "<|im_start|>user\nhi<|im_end|><think>x</think>");
  // <think> is an added token but not a special one, so skipping special tokens keeps it.
  EXPECT_EQ(qwen3().decode(ids, true), "user\nhi<think>x</think>");

  const auto llama_ids = llama3().encode("a<|eot_id|>b<|start_header_id|>", false);
  EXPECT_EQ(llama_ids, (std::vector<int32_t>{*llama3().token_to_id("a"), 128009, *llama3().token_to_id("b"), 128006}));
  // A special token split by other text is plain text.
  const auto split = llama3().encode("<|eot_ id|>", false);
  EXPECT_EQ(std::count(split.begin(), split.end(), 128009), 0);
}

TEST(TokenizerEdgeCases, SpecialTokensAddedOnRequest) {
  EXPECT_EQ(llama2().special_prefix_ids(), std::vector<int32_t>{1});
  const auto ids = llama2().encode("hi", true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), llama2().encode("hi", false));
  EXPECT_EQ(qwen3().encode("hi", true), qwen3().encode("hi", false));
}

TEST(TokenizerEdgeCases, TokenBytes) {
  EXPECT_EQ(qwen3().token_bytes(*qwen3().token_to_id("\xC4\xA0the")), " the");  // "Ġthe"
  EXPECT_EQ(llama2().token_bytes(*llama2().token_to_id("<0x0A>")), "\n");
  EXPECT_EQ(llama2().token_bytes(*llama2().token_to_id("\xE2\x96\x81the")), " the");  // "▁the"
  EXPECT_EQ(llama2().token_bytes(1), "<s>");
  EXPECT_THROW(qwen3().token_bytes(qwen3().vocab_size()), Error);
  EXPECT_THROW(qwen3().token_bytes(-1), Error);
}

TEST(TokenizerEdgeCases, UnknownIdsAreSkippedOnDecode) {
  // Qwen3 checkpoints pad the embedding to 151936 rows; ids past the vocabulary decode to nothing.
  EXPECT_EQ(qwen3().decode(std::vector<int32_t>{9707, 151900, 1879}, false), "Hello world");
}

TEST(TokenizerEdgeCases, StreamingHoldsBackSplitCharacters) {
  // "😀" is four bytes; byte-level tokenizers may split it across tokens.
  const auto ids = qwen3().encode("a😀😀😀b", false);
  IncrementalDetokenizer stream(qwen3());
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_FALSE(utf8::first_invalid_offset(piece).has_value());
    streamed += piece;
  }
  EXPECT_EQ(streamed + stream.flush(), "a😀😀😀b");
}

TEST(TokenizerThreads, ConcurrentEncodeMatchesSequential) {
  std::mt19937 rng(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(random_text(rng, 200, false));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : texts) expected.push_back(qwen3().encode(text, false));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = t; i < texts.size() * 4; i += 4) {
        if (qwen3().encode(texts[i % texts.size()], false) != expected[i % texts.size()]) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(qwen3().encode_batch(texts, false, 3), expected);
}

TEST(TokenizerThreads, BatchErrorsReachTheCaller) {
  const std::vector<std::string> texts = {"fine", std::string("\xFF\xFE"), "fine"};
  EXPECT_THROW(qwen3().encode_batch(texts, false, 2), Error);
}

}  // namespace
}  // namespace tern
