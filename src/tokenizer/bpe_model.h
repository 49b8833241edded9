#pragma once
// The BPE model of tokenizer.json ("model": {"type": "BPE"}): turns one pre-tokenized word into token ids by
// starting from characters (or bytes) and applying merges lowest rank first, leftmost first on ties, exactly as
// Hugging Face's Word::merge_all does. Covers GPT-2 style byte-level BPE and SentencePiece-style BPE with
// byte fallback (<0xXX> tokens), unk fusing, continuing-subword prefixes and `ignore_merges`.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/merge_table.h"
#include "tokenizer/string_id_map.h"

namespace tern {

class BpeModel {
 public:
  // `raw_byte_input`: words arrive as raw bytes (the pre-tokenizer ended with ByteLevel) and each byte starts as
  // the token of its byte-level character.
  BpeModel(const nlohmann::json& model_config, std::vector<std::pair<std::string, int64_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool raw_byte_input);
  // The maps point into this object's own vectors.
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one word. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // Token strings by id (as spelled in the vocabulary); ids the vocabulary skips hold empty strings.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;

 private:
  void resolve_merges(const std::vector<std::pair<std::string, std::string>>& merges);
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;
  // The starting symbols of a word: one per character (or byte), with byte fallback and unk handling.
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  void add_unit(std::string_view unit_token, std::optional<int32_t> unit_id, std::vector<int32_t>& symbols,
                std::optional<int32_t>& pending_unk) const;
  void merge_all(std::vector<int32_t>& symbols) const;

  std::vector<std::string> id_to_token_;
  StringIdMap token_to_id_;  // over id_to_token_
  MergeTable merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<std::optional<int32_t>, 256> byte_fallback_ids_{};  // <0xXX> tokens
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool raw_byte_input_ = false;
  std::array<std::optional<int32_t>, 256> byte_level_ids_{};  // raw byte -> token of its byte-level character
  // For ignore_merges on raw-byte input: each token's bytes, and the map from them to ids.
  std::vector<std::string> id_to_raw_bytes_;
  StringIdMap raw_bytes_to_id_;

  // Words seen before, sharded so that threads encoding in parallel rarely wait on one another.
  // Lookups hash the word once and compare without copying it; stored keys own their bytes.
  template <typename Text>
  struct BasicCacheKey {
    Text word;
    std::size_t hash;
  };
  struct CacheKeyHash {
    using is_transparent = void;
    template <typename Text>
    std::size_t operator()(const BasicCacheKey<Text>& key) const { return key.hash; }
  };
  struct CacheKeyEqual {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const BasicCacheKey<A>& a, const BasicCacheKey<B>& b) const {
      return a.hash == b.hash && std::string_view(a.word) == std::string_view(b.word);
    }
  };
  using CacheKey = BasicCacheKey<std::string_view>;
  struct CacheShard {
    std::mutex mutex;
    std::unordered_map<BasicCacheKey<std::string>, std::vector<int32_t>, CacheKeyHash, CacheKeyEqual> words;
  };
  static constexpr std::size_t kNumCacheShards = 64;
  static constexpr std::size_t kMaxCachedWordsPerShard = 4096;
  static constexpr std::size_t kMaxCachedWordBytes = 256;
  mutable std::array<CacheShard, kNumCacheShards> cache_;
};

}  // namespace tern
