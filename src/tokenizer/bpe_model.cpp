#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tern {

namespace {

using json = nlohmann::json;

std::string optional_string(const json& config, const char* field) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return {};
  if (!it->is_string()) fail("tokenizer.json: model.{} must be a string or null", field);
  return it->get<std::string>();
}

bool optional_bool(const json& config, const char* field) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail("tokenizer.json: model.{} must be a boolean", field);
  return it->get<bool>();
}

// Words up to this many symbols merge by rescanning the pairs; longer ones use a heap, whose bookkeeping only
// pays off on long inputs (SentencePiece-style models see whole sentences as one word).
constexpr std::size_t kLinearMergeMaxSymbols = 48;

}  // namespace

BpeModel::BpeModel(const json& config, std::vector<std::pair<std::string, int64_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool raw_byte_input)
    : raw_byte_input_(raw_byte_input) {
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id > INT32_MAX - 1) fail("tokenizer.json: model.vocab id {} of '{}' is out of range", id, token);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  std::vector<bool> seen(id_to_token_.size(), false);
  for (auto& [token, id] : vocab) {
    if (seen[id]) fail("tokenizer.json: model.vocab assigns id {} twice (second time to '{}')", id, token);
    seen[id] = true;
    id_to_token_[id] = std::move(token);
  }
  token_to_id_.build(id_to_token_, seen);

  continuing_subword_prefix_ = optional_string(config, "continuing_subword_prefix");
  end_of_word_suffix_ = optional_string(config, "end_of_word_suffix");
  byte_fallback_ = optional_bool(config, "byte_fallback");
  fuse_unk_ = optional_bool(config, "fuse_unk");
  ignore_merges_ = optional_bool(config, "ignore_merges");
  // model.dropout is a training-time regularizer; inference always applies every merge.
  if (const std::string unk = optional_string(config, "unk_token"); !unk.empty()) {
    unk_id_ = token_to_id(unk);
    if (!unk_id_) fail("tokenizer.json: model.unk_token '{}' is not in model.vocab", unk);
  }
  for (int byte = 0; byte < 256; ++byte) {
    byte_fallback_ids_[byte] = token_to_id(fmt::format("<0x{:02X}>", byte));
    byte_level_ids_[byte] = token_to_id(byte_level::byte_to_char()[byte]);
  }
  if (raw_byte_input_ && ignore_merges_) {
    id_to_raw_bytes_.resize(id_to_token_.size());
    std::vector<bool> decodable(id_to_token_.size(), false);
    for (std::size_t id = 0; id < id_to_token_.size(); ++id) {
      if (auto bytes = byte_level::decode(id_to_token_[id]); bytes && seen[id]) {
        id_to_raw_bytes_[id] = std::move(*bytes);
        decodable[id] = true;
      }
    }
    raw_bytes_to_id_.build(id_to_raw_bytes_, decodable);
  }

  resolve_merges(merges);
}

void BpeModel::resolve_merges(const std::vector<std::pair<std::string, std::string>>& merges) {
  // Turning merge strings into ids is hundreds of thousands of independent, cache-missing lookups: spread them
  // over a few threads, then fill the table in rank order on this one.
  struct Resolved {
    int32_t left, right, merged;  // merged < 0: some token is missing from the vocabulary
  };
  std::vector<Resolved> resolved(merges.size());
  const std::size_t prefix_len = continuing_subword_prefix_.size();
  const auto resolve_range = [&](std::size_t begin, std::size_t end) {
    std::string merged;
    for (std::size_t rank = begin; rank < end; ++rank) {
      const auto& [left, right] = merges[rank];
      merged.assign(left);
      if (right.size() >= prefix_len) merged.append(right, prefix_len);
      const auto left_id = token_to_id(left), right_id = token_to_id(right), merged_id = token_to_id(merged);
      resolved[rank] = left_id && right_id && merged_id ? Resolved{*left_id, *right_id, *merged_id} : Resolved{-1, -1, -1};
    }
  };
  constexpr std::size_t kMergesPerThread = 32768;
  const std::size_t num_threads =
      std::clamp<std::size_t>(merges.size() / kMergesPerThread, 1, std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
  {
    std::vector<std::jthread> workers;
    const std::size_t chunk = (merges.size() + num_threads - 1) / num_threads;
    for (std::size_t t = 1; t < num_threads; ++t) {
      workers.emplace_back(resolve_range, std::min(merges.size(), t * chunk), std::min(merges.size(), (t + 1) * chunk));
    }
    resolve_range(0, std::min(merges.size(), chunk));
  }

  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const Resolved& merge = resolved[rank];
    if (merge.merged < 0) {
      const auto& [left, right] = merges[rank];
      fail("tokenizer.json: merge #{} '{} {}' uses or makes a token missing from model.vocab", rank, left, right);
    }
    merges_.insert(merge.left, merge.right, Merge{static_cast<int32_t>(rank), merge.merged});
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const { return token_to_id_.find(token); }

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWordBytes) {
    encode_uncached(word, out);
    return;
  }
  const std::size_t hash = std::hash<std::string_view>{}(word);
  CacheShard& shard = cache_[(hash >> 8) % kNumCacheShards];
  {
    std::lock_guard lock(shard.mutex);
    if (const auto it = shard.words.find(CacheKey{word, hash}); it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  encode_uncached(word, out);
  std::lock_guard lock(shard.mutex);
  if (shard.words.size() < kMaxCachedWordsPerShard) {
    shard.words.emplace(BasicCacheKey<std::string>{std::string(word), hash}, std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (raw_byte_input_) {
      if (const auto id = raw_bytes_to_id_.find(word)) {
        out.push_back(*id);
        return;
      }
    } else if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  merge_all(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::add_unit(std::string_view unit_token, std::optional<int32_t> unit_id, std::vector<int32_t>& symbols,
                        std::optional<int32_t>& pending_unk) const {
  if (unit_id) {
    if (pending_unk) symbols.push_back(*pending_unk), pending_unk.reset();
    symbols.push_back(*unit_id);
    return;
  }
  if (byte_fallback_ && std::all_of(unit_token.begin(), unit_token.end(), [&](char c) {
        return byte_fallback_ids_[static_cast<unsigned char>(c)].has_value();
      })) {
    if (pending_unk) symbols.push_back(*pending_unk), pending_unk.reset();
    for (char c : unit_token) symbols.push_back(*byte_fallback_ids_[static_cast<unsigned char>(c)]);
    return;
  }
  if (!unk_id_) return;  // Hugging Face drops characters it can neither find nor replace
  if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
  pending_unk = unk_id_;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  std::optional<int32_t> pending_unk;
  if (raw_byte_input_) {
    const auto& chars = byte_level::byte_to_char();
    for (char c : word) {
      const auto byte = static_cast<unsigned char>(c);
      add_unit(chars[byte], byte_level_ids_[byte], symbols, pending_unk);
    }
  } else {
    const bool affixes = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
    std::string unit;
    std::size_t pos = 0;
    while (pos < word.size()) {
      const std::size_t start = pos;
      const std::size_t len = utf8::valid_sequence_len(word, pos);
      pos += len == 0 ? 1 : len;
      std::string_view unit_view = word.substr(start, pos - start);
      if (affixes) {
        unit.assign(start == 0 ? std::string() : continuing_subword_prefix_);
        unit += unit_view;
        if (pos == word.size()) unit += end_of_word_suffix_;
        unit_view = unit;
      }
      add_unit(unit_view, token_to_id(unit_view), symbols, pending_unk);
    }
  }
  if (pending_unk) symbols.push_back(*pending_unk);
}

void BpeModel::merge_all(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  if (symbols.size() <= kLinearMergeMaxSymbols) {
    // Repeatedly merge the lowest-ranked adjacent pair (leftmost on ties).
    thread_local std::vector<Merge> pair_merges;
    constexpr Merge kNone{INT32_MAX, -1};
    pair_merges.resize(symbols.size() - 1);
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      pair_merges[i] = merges_.find(symbols[i], symbols[i + 1]).value_or(kNone);
    }
    while (!pair_merges.empty()) {
      std::size_t best = 0;
      for (std::size_t i = 1; i < pair_merges.size(); ++i) {
        if (pair_merges[i].rank < pair_merges[best].rank) best = i;
      }
      if (pair_merges[best].rank == INT32_MAX) break;
      symbols[best] = pair_merges[best].merged_id;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      pair_merges.erase(pair_merges.begin() + static_cast<std::ptrdiff_t>(best));
      if (best > 0) pair_merges[best - 1] = merges_.find(symbols[best - 1], symbols[best]).value_or(kNone);
      if (best < pair_merges.size()) pair_merges[best] = merges_.find(symbols[best], symbols[best + 1]).value_or(kNone);
    }
    return;
  }

  // Linked list of symbols plus a min-heap of candidate merges; entries made stale by earlier merges are skipped.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, merged_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  const auto n = static_cast<int32_t>(symbols.size());
  std::vector<Symbol> list(symbols.size());
  for (int32_t i = 0; i < n; ++i) list[i] = {symbols[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const auto merge = merges_.find(list[i].id, list[i + 1].id)) heap.push({merge->rank, i, merge->merged_id});
  }
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = list[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = list[left.next];
    const auto current = merges_.find(left.id, right.id);
    if (!current || current->merged_id != top.merged_id || current->rank != top.rank) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) list[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const auto merge = merges_.find(list[left.prev].id, left.id)) {
        heap.push({merge->rank, left.prev, merge->merged_id});
      }
    }
    if (left.next >= 0) {
      if (const auto merge = merges_.find(left.id, list[left.next].id)) {
        heap.push({merge->rank, top.pos, merge->merged_id});
      }
    }
  }
  symbols.clear();
  for (int32_t i = 0; i >= 0; i = list[i].next) symbols.push_back(list[i].id);
}

}  // namespace tern
