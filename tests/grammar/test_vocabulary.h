#pragma once
// Test helpers: real vocabularies as raw token bytes (read from tokenizer.json, undoing the GPT-2 byte-to-unicode
// mapping of byte-level BPE), a tiny byte vocabulary, and a seeded random walk that plays a "garbage" model.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fixtures.h"
#include "grammar/grammar_matcher.h"

namespace tern::testing {

inline std::string utf8_of(uint32_t cp) {
  std::string out;
  grammar::append_utf8(out, cp);
  return out;
}

// name: a folder of fixtures/tokenizers (qwen3, llama3). Special added tokens become empty (never allowed).
inline std::shared_ptr<const grammar::TokenVocabulary> load_byte_level_vocabulary(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const grammar::TokenVocabulary>> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  auto dir = fixtures_dir() / "tokenizers" / name;
  nlohmann::json tokenizer = read_json(dir / "tokenizer.json");
  nlohmann::json config = read_json(dir / "tokenizer_config.json");
  // GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256, 257, ...
  std::map<std::string, uint8_t> char_to_byte;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    char_to_byte[utf8_of(printable ? b : next++)] = static_cast<uint8_t>(b);
  }
  std::vector<std::string> bytes;
  auto put = [&](size_t id, std::string value) {
    if (bytes.size() <= id) bytes.resize(id + 1);
    bytes[id] = std::move(value);
  };
  for (auto& [token, id] : tokenizer["model"]["vocab"].items()) {
    std::string raw;
    for (size_t i = 0; i < token.size();) {
      size_t len = 1;
      auto lead = static_cast<unsigned char>(token[i]);
      if (lead >= 0xC0) len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
      raw += static_cast<char>(char_to_byte.at(token.substr(i, len)));
      i += len;
    }
    put(id.get<size_t>(), raw);
  }
  std::vector<int32_t> eos;
  std::string eos_text = config["eos_token"].is_string() ? config["eos_token"].get<std::string>()
                                                          : config["eos_token"]["content"].get<std::string>();
  for (const auto& added : tokenizer["added_tokens"]) {
    size_t id = added["id"].get<size_t>();
    put(id, added["special"].get<bool>() ? "" : added["content"].get<std::string>());
    if (added["content"] == eos_text) eos.push_back(static_cast<int32_t>(id));
  }
  auto vocabulary = std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), std::move(eos));
  cache[name] = vocabulary;
  return vocabulary;
}

// Every single byte as a token, plus a few multi-byte tokens, and EOS as the last id.
inline std::shared_ptr<const grammar::TokenVocabulary> tiny_vocabulary(std::vector<std::string> extra = {}) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (auto& e : extra) bytes.push_back(e);
  bytes.push_back("");
  int32_t eos = static_cast<int32_t>(bytes.size() - 1);
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{eos});
}

struct WalkOptions {
  size_t soft_cap_tokens = 40;   // after this, steer towards the end
  size_t hard_cap_tokens = 3000; // a walk this long is a failure to terminate
  size_t mask_checks_per_step = 24;  // random tokens whose mask bit is compared with accept_token
};

// A seeded "garbage model": picks random allowed tokens (EOS sometimes when allowed); after the soft cap it picks
// the candidate that brings the end closest, which always terminates because every single byte is a token.
// Checks on every step that EOS is allowed exactly when the matcher accepts, and that the mask agrees with
// accept_token on a sample of tokens. Returns the output bytes.
inline std::string random_walk(const std::shared_ptr<const grammar::CompiledGrammar>& compiled, uint64_t seed,
                               const WalkOptions& options = {}) {
  const grammar::TokenVocabulary& vocabulary = compiled->vocabulary();
  grammar::GrammarMatcher matcher(compiled, 4);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> single_byte_tokens;
  for (size_t id = 0; id < vocabulary.size(); ++id) {
    if (vocabulary.bytes(static_cast<int32_t>(id)).size() == 1 && !vocabulary.is_eos(static_cast<int32_t>(id))) {
      single_byte_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  int32_t eos = vocabulary.eos_ids().at(0);
  std::string text;
  for (size_t step = 0;; ++step) {
    if (step > options.hard_cap_tokens) {
      ADD_FAILURE() << "random walk did not terminate; text so far: " << text;
      return text;
    }
    std::vector<uint32_t> mask = matcher.next_token_bitmask();
    EXPECT_EQ(grammar::bitmask_test(mask, eos), matcher.is_accepting()) << "after: " << text;
    for (size_t k = 0; k < options.mask_checks_per_step; ++k) {
      auto id = static_cast<int32_t>(rng() % vocabulary.size());
      bool accepted = matcher.accept_token(id);
      if (accepted) matcher.rollback(1);
      EXPECT_EQ(grammar::bitmask_test(mask, id), accepted)
          << "token " << id << " '" << vocabulary.bytes(id) << "' after: " << text;
    }
    std::vector<int32_t> allowed;
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        if (id != eos) allowed.push_back(id);
      }
    }
    bool eos_allowed = grammar::bitmask_test(mask, eos);
    if (eos_allowed && (step >= options.soft_cap_tokens || allowed.empty() || rng() % 10 == 0)) {
      EXPECT_TRUE(matcher.accept_token(eos));
      EXPECT_TRUE(matcher.is_terminated());
      return text;
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed and the grammar cannot end; text: " << text;
      return text;
    }
    int32_t choice = allowed[rng() % allowed.size()];
    if (step >= options.soft_cap_tokens) {
      std::vector<int32_t> candidates;
      for (int32_t id : single_byte_tokens) {
        if (grammar::bitmask_test(mask, id)) candidates.push_back(id);
      }
      for (int k = 0; k < 32; ++k) candidates.push_back(allowed[rng() % allowed.size()]);
      uint32_t best = UINT32_MAX;
      for (int32_t id : candidates) {
        if (!matcher.accept_token(id)) continue;
        uint32_t remaining = matcher.min_bytes_to_accept();
        matcher.rollback(1);
        if (remaining < best || (remaining == best && rng() % 2)) {
          best = remaining;
          choice = id;
        }
      }
    }
    if (!matcher.accept_token(choice)) {
      ADD_FAILURE() << "token " << choice << " was in the mask but not accepted; text: " << text;
      return text;
    }
    text += vocabulary.bytes(choice);
  }
}

}  // namespace tern::testing
