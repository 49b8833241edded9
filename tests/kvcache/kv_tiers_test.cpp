// The host and disk tiers under the prefix cache, checked against a simulation of the memories: every block holds
// a tag naming the prefix whose KV it holds, the tier copies move tags as the model runner moves bytes, and every
// prefix hit must hand a sequence device blocks tagged with its own prefix.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "kvcache/kv_cache_manager.h"

namespace tern {
namespace {

constexpr int32_t kBlockSize = 4;

using Tag = std::vector<int32_t>;  // the group, then the prefix's tokens up to the block's end

Tag tag_of(std::span<const int32_t> tokens, int32_t block, int32_t group) {
  Tag tag{group};
  tag.insert(tag.end(), tokens.begin(), tokens.begin() + (block + 1) * kBlockSize);
  return tag;
}

using DiskRecords = std::unordered_map<KvBlockKey, Tag, KvBlockKeyHash>;

// Disk records in memory, which outlive the cache (a restart); `corrupt` keys fail their read as a checksum would.
class FakeDisk final : public KvDiskTier {
 public:
  FakeDisk(std::vector<Tag>& host, std::shared_ptr<DiskRecords> records) : host_(host), records_(*records), keep_(records) {}
  bool contains(const KvBlockKey& key) const override { return records_.contains(key); }
  void store(const KvBlockKey& key, const KvBlockKey&, int32_t, std::span<const int32_t>, int32_t block) override {
    records_[key] = host_.at(block);
    ++num_stores;
  }
  bool load(const KvBlockKey& key, const KvBlockKey&, int32_t, std::span<const int32_t>, int32_t block) override {
    const auto it = records_.find(key);
    if (it == records_.end()) return false;
    if (corrupt.contains(key)) {
      records_.erase(it);
      return false;
    }
    host_.at(block) = it->second;
    ++num_loads;
    return true;
  }
  std::unordered_set<KvBlockKey, KvBlockKeyHash> corrupt;
  int num_stores = 0;
  int num_loads = 0;

 private:
  std::vector<Tag>& host_;
  DiskRecords& records_;
  std::shared_ptr<DiskRecords> keep_;
};

// A KV cache manager with simulated device and host memories.
class TieredCache {
 public:
  // `disk`: the disk tier's records (null: no disk tier).
  TieredCache(int32_t num_blocks, KvTierConfig tiers, std::vector<int64_t> windows = {0},
              std::shared_ptr<DiskRecords> disk = nullptr)
      : device_(static_cast<size_t>(num_blocks)),
        host_(static_cast<size_t>(std::max(tiers.num_host_blocks, 1))),
        disk_(host_, disk ? disk : std::make_shared<DiskRecords>()) {
    if (disk) tiers.disk = &disk_;
    kv_ = std::make_unique<KvCacheManager>(num_blocks, kBlockSize, true, 0, std::move(windows), tiers);
  }

  // Runs a request of `tokens` (prompt) through prefill as the engine would, in chunks of two blocks: match, then
  // per chunk allocate, the chunk's copies, compute (tagging its blocks) and caching. Checks that every block the hit
  // handed over holds the right prefix. Returns the cached tokens.
  int32_t run(std::span<const int32_t> tokens) {
    SequenceBlocks seq;
    const int32_t cached = kv_->match_prefix(seq, tokens);
    kv_->record_prefix_query(static_cast<int64_t>(tokens.size()), cached);
    const auto num_tokens = static_cast<int64_t>(tokens.size());
    bool first = true;
    for (int64_t computed = cached; computed < num_tokens;) {
      const int64_t end = std::min(num_tokens, computed + 2 * kBlockSize);
      EXPECT_TRUE(kv_->allocate(seq, computed, end));
      apply(kv_->take_tier_copies());
      for (size_t g = 0; g < seq.tables.size(); ++g) {
        for (int32_t b = 0; b < seq.num_blocks(); ++b) {
          const int32_t block = seq.tables[g][b];
          if (block == kNoBlock) continue;
          if (b < cached / kBlockSize) {
            if (first) EXPECT_EQ(device_[block], tag_of(tokens, b, static_cast<int32_t>(g))) << "block " << b;
          } else if (b >= computed / kBlockSize && (b + 1) * kBlockSize <= end) {
            device_[block] = tag_of(tokens, b, static_cast<int32_t>(g));  // the step computes it
          }
        }
      }
      first = false;
      computed = end;
      kv_->cache_blocks(seq, tokens, computed);
    }
    kv_->free(seq);
    return cached;
  }

  void apply(const std::vector<KvTierCopy>& copies) {
    for (const KvTierCopy& copy : copies) {
      if (copy.direction == KvTierCopy::Direction::kToHost) {
        host_.at(copy.host_block) = device_.at(copy.device_block);
        ++num_to_host;
      } else {
        device_.at(copy.device_block) = host_.at(copy.host_block);
        ++num_to_device;
      }
    }
  }

  KvCacheManager& kv() { return *kv_; }
  FakeDisk& disk() { return disk_; }
  int num_to_host = 0;
  int num_to_device = 0;

 private:
  std::vector<Tag> device_;
  std::vector<Tag> host_;
  FakeDisk disk_;
  std::unique_ptr<KvCacheManager> kv_;
};

std::vector<int32_t> prompt(int32_t id, int32_t len) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < len; ++i) tokens.push_back(id * 1000 + i);
  return tokens;
}

// A pool of 5 blocks holds one prompt of 17 tokens (4 whole blocks and 1).
TEST(KvTiers, EvictedPrefixesComeBackFromTheHostTier) {
  TieredCache cache(5, {.num_host_blocks = 16});
  const auto a = prompt(1, 17);
  const auto b = prompt(2, 17);
  EXPECT_EQ(cache.run(a), 0);
  EXPECT_EQ(cache.num_to_host, 0);  // write-back: nothing copied while the device has room
  EXPECT_EQ(cache.run(b), 0);       // evicts a's blocks to make room: each is written back first
  EXPECT_EQ(cache.num_to_host, 4);
  EXPECT_EQ(cache.run(a), 16);      // a's prefix loads back from the host (b's blocks go there to make room)
  EXPECT_EQ(cache.num_to_device, 4);
  EXPECT_EQ(cache.num_to_host, 8);
  EXPECT_EQ(cache.kv().prefix_stats().num_host_hit_tokens, 16);
  EXPECT_EQ(cache.run(a), 16);      // now on the device again: no copy
  EXPECT_EQ(cache.num_to_device, 4);
  EXPECT_EQ(cache.kv().tier_stats().num_blocks_to_device, 4);
}

TEST(KvTiers, WithoutAHostTierAnEvictedPrefixIsRecomputed) {
  TieredCache cache(5, {});
  const auto a = prompt(1, 17);
  cache.run(a);
  cache.run(prompt(2, 17));
  EXPECT_EQ(cache.run(a), 0);
  EXPECT_EQ(cache.num_to_host + cache.num_to_device, 0);
}

TEST(KvTiers, WriteThroughCopiesOnCachingAndNotOnEviction) {
  TieredCache cache(5, {.num_host_blocks = 16, .write_through = true});
  const auto a = prompt(1, 17);
  cache.run(a);
  EXPECT_EQ(cache.num_to_host, 4);  // each block copied once cached (taken with the next chunk's plan)
  cache.run(prompt(2, 17));
  EXPECT_EQ(cache.num_to_host, 8);  // b's; evicting a's copied nothing
  EXPECT_EQ(cache.run(a), 16);
  EXPECT_EQ(cache.num_to_host, 8);  // nor did evicting b's
  EXPECT_EQ(cache.num_to_device, 4);
}

TEST(KvTiers, AFullHostTierSpillsToDiskAndTheDiskServesHits) {
  TieredCache cache(5, {.num_host_blocks = 4}, {0}, std::make_shared<DiskRecords>());
  const auto a = prompt(1, 17);
  cache.run(a);
  cache.run(prompt(2, 17));  // a -> host
  cache.run(prompt(3, 17));  // b -> host, a -> disk
  EXPECT_EQ(cache.disk().num_stores, 4);
  // Each block read from disk stays pinned in the host pool until its copy to the device is taken, as do the write-
  // backs of the device blocks it replaces: a host pool this small stages only part of the prefix.
  const int32_t cached = cache.run(a);
  EXPECT_GE(cached, 8);
  EXPECT_EQ(cache.disk().num_loads, cached / kBlockSize);
  EXPECT_EQ(cache.kv().prefix_stats().num_disk_hit_tokens, cached);
}

TEST(KvTiers, AfterARestartTheDiskServesAPrefixTheTreeNeverHeld) {
  auto records = std::make_shared<DiskRecords>();
  const auto a = prompt(1, 17);
  {
    TieredCache first(5, {.num_host_blocks = 4}, {0}, records);
    first.run(a);
    first.run(prompt(2, 17));
    first.run(prompt(3, 17));  // a's blocks reach the disk
  }
  TieredCache restarted(5, {.num_host_blocks = 4}, {0}, records);
  EXPECT_EQ(restarted.run(a), 16);  // run() checks each block's tag
  EXPECT_EQ(restarted.kv().prefix_stats().num_disk_hit_tokens, 16);
  EXPECT_EQ(restarted.run(prompt(2, 17)), 0);  // b reached the host tier only
}

TEST(KvTiers, ACorruptDiskRecordEndsTheHitBeforeIt) {
  TieredCache cache(5, {.num_host_blocks = 4}, {0}, std::make_shared<DiskRecords>());
  const auto a = prompt(1, 17);
  cache.run(a);
  cache.run(prompt(2, 17));
  cache.run(prompt(3, 17));
  KvBlockKey key{};
  for (int32_t b = 0; b < 3; ++b) key = chain_block_key(key, 0, std::span<const int32_t>(a).subspan(b * kBlockSize, kBlockSize));
  cache.disk().corrupt.insert(key);  // a's third block
  EXPECT_EQ(cache.run(a), 8);
  EXPECT_EQ(cache.kv().prefix_stats().num_disk_hit_tokens, 8);
}

TEST(KvTiers, SlidingWindowGroupsKeepTheirWindowThroughTheHostTier) {
  // Two groups: keep-all and a sliding window of 6 tokens (gpt-oss's layout).
  TieredCache cache(12, {.num_host_blocks = 32}, {0, 6});
  const auto a = prompt(1, 25);
  cache.run(a);
  cache.run(prompt(2, 25));
  cache.run(prompt(3, 25));
  EXPECT_EQ(cache.run(a), 24);
  EXPECT_GT(cache.kv().prefix_stats().num_host_hit_tokens, 0);
}

// Many requests over a few shared documents, with the device, host and disk all too small: every hit holds the
// right KV (checked in run), and when all requests are gone the pools are as they started.
TEST(KvTiers, ManyRequestsNeverServeWrongBlocksAndLeakNothing) {
  for (const auto& [write_through, windows] : {std::pair{false, std::vector<int64_t>{0}},
                                                std::pair{true, std::vector<int64_t>{0}},
                                                std::pair{false, std::vector<int64_t>{0, 6}}}) {
    TieredCache cache(24, {.num_host_blocks = 20, .write_through = write_through}, windows,
                      std::make_shared<DiskRecords>());
    std::mt19937 rng(7);
    int64_t hits = 0;
    for (int i = 0; i < 10000; ++i) {
      // A shared document (one of 12) followed by a turn of its own, or another turn of an earlier conversation.
      const int32_t document = static_cast<int32_t>(rng() % 12);
      auto tokens = prompt(document, 4 + static_cast<int32_t>(rng() % 24));
      const int32_t extra = static_cast<int32_t>(rng() % 9);
      for (int32_t t = 0; t < extra; ++t) tokens.push_back(static_cast<int32_t>(rng() % 50) + 500000);
      hits += cache.run(tokens);
    }
    EXPECT_GT(hits, 0);
    EXPECT_GT(cache.kv().prefix_stats().num_host_hit_tokens, 0);
    EXPECT_GT(cache.kv().prefix_stats().num_disk_hit_tokens, 0);
    cache.apply(cache.kv().take_tier_copies());
    EXPECT_EQ(cache.kv().num_available_blocks(), 24);       // free, or held by the prefix cache alone
    EXPECT_EQ(cache.kv().num_available_host_blocks(), 20);  // no pin left behind
  }
}

TEST(KvTiers, ADiskTierNeedsAHostTier) {
  std::vector<Tag> host(1);
  FakeDisk disk(host, std::make_shared<DiskRecords>());
  EXPECT_THROW(KvCacheManager(8, kBlockSize, true, 0, {0}, {.disk = &disk}), Error);
}

}  // namespace
}  // namespace tern
