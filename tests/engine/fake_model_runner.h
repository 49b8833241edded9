#pragma once
// A stand-in for the model runner that behaves like a causal model over a paged KV cache without any math: the
// "KV" of position p is a hash of tokens 0..p, read from the slot of position p-1 through the block table and
// written to the slot of p. The next token is that hash modulo the vocabulary. Any block-table, prefix-cache or
// preemption mistake changes the tokens, and the reference is a plain loop over the token list. A token in flight
// (overlap scheduling) is the one the previous execute sampled for its sequence.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "engine/step_plan.h"

namespace tern::testing {

inline uint64_t mix_token(uint64_t hash, int32_t token) {
  uint64_t z = hash ^ (static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2));
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 29);
}

constexpr uint64_t kEmptyHash = 0x1234567;
constexpr int32_t kFakeVocab = 1000;

inline int32_t fake_next_token(uint64_t hash) { return static_cast<int32_t>(hash % kFakeVocab); }

// What the fake model generates greedily after `prompt`: `count` tokens.
inline std::vector<int32_t> fake_reference(std::span<const int32_t> prompt, int32_t count) {
  uint64_t h = kEmptyHash;
  for (int32_t t : prompt) h = mix_token(h, t);
  std::vector<int32_t> out;
  for (int32_t i = 0; i < count; ++i) {
    out.push_back(fake_next_token(h));
    h = mix_token(h, out.back());
  }
  return out;
}

class FakeModelRunner {
 public:
  FakeModelRunner(int32_t num_blocks, int32_t block_size)
      : block_size_(block_size), slots_(static_cast<size_t>(num_blocks) * block_size, 0) {}

  StepResult execute(const StepPlan& plan) {
    for (uint64_t id : plan.finished_sequence_ids) {
      EXPECT_TRUE(known_.erase(id)) << "finished sequence " << id << " was never announced";
      finished_.insert(id);
    }
    for (const auto& seq : plan.new_sequences) EXPECT_TRUE(known_.insert(seq.sequence_id).second);
    StepResult result;
    for (const auto& chunk : plan.chunks) {
      EXPECT_TRUE(known_.count(chunk.sequence_id)) << "sequence " << chunk.sequence_id << " unknown";
      EXPECT_FALSE(finished_.count(chunk.sequence_id));
      const int64_t end = chunk.num_cached_tokens + static_cast<int64_t>(chunk.token_ids.size());
      EXPECT_EQ(chunk.block_tables.size(), 1u);  // the scheduler tests' managers have one group
      EXPECT_GE(static_cast<int64_t>(chunk.block_tables.at(0).size()) * block_size_, end);
      uint64_t h = chunk.num_cached_tokens == 0 ? kEmptyHash : slots_[slot(chunk, chunk.num_cached_tokens - 1)];
      for (size_t i = 0; i < chunk.token_ids.size(); ++i) {
        h = mix_token(h, token_at(chunk, i));
        slots_[slot(chunk, chunk.num_cached_tokens + static_cast<int64_t>(i))] = h;
      }
      num_tokens_ += static_cast<int64_t>(chunk.token_ids.size());
      if (chunk.sample) result.tokens.push_back({chunk.sequence_id, fake_next_token(h), std::nullopt});
    }
    previous_samples_.clear();
    for (const auto& token : result.tokens) previous_samples_[token.sequence_id] = token.token_id;
    return result;
  }
  int64_t num_tokens_computed() const { return num_tokens_; }
  int64_t num_tokens_in_flight_read() const { return num_in_flight_; }

 private:
  // A kTokenInFlight is the token the previous execute sampled for the sequence (as a device would resolve it).
  int32_t token_at(const ScheduledChunk& chunk, size_t i) {
    if (chunk.token_ids[i] != kTokenInFlight) return chunk.token_ids[i];
    ++num_in_flight_;
    EXPECT_EQ(i + 1, chunk.token_ids.size()) << "only a chunk's last token can be in flight";
    const auto it = previous_samples_.find(chunk.sequence_id);
    if (it == previous_samples_.end()) {
      ADD_FAILURE() << "sequence " << chunk.sequence_id << " has a token in flight the last step did not sample";
      return 0;
    }
    return it->second;
  }

  size_t slot(const ScheduledChunk& chunk, int64_t position) const {
    return static_cast<size_t>(chunk.block_tables.at(0).at(position / block_size_)) * block_size_ + position % block_size_;
  }

  int32_t block_size_;
  std::vector<uint64_t> slots_;
  std::set<uint64_t> known_, finished_;
  std::map<uint64_t, int32_t> previous_samples_;
  int64_t num_tokens_ = 0;
  int64_t num_in_flight_ = 0;
};

}  // namespace tern::testing
