#pragma once
// The prefix cache: a radix tree over token ids whose edges are whole KV blocks (SGLang's RadixAttention with a
// page size of one block). A path from the root spells a token prefix; each node owns one reference to the block
// holding the KV of its block_size tokens. A new request walks the tree to reuse the longest cached prefix,
// including earlier turns of its conversation; unreferenced leaves are evicted least recently used first when the
// pool runs short.
//
// Invariant that makes eviction simple: a sequence's block table is a path of cached blocks from the root followed
// by blocks of its own, so a node referenced by a sequence has all its ancestors referenced too, and every block
// referenced only by the cache can be evicted leaf first.
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"

namespace tern {

struct RadixNode {
  RadixNode* parent = nullptr;
  std::vector<int32_t> tokens;  // [block_size] token ids of this node's block; empty at the root
  int32_t block = -1;
  uint64_t last_access = 0;
  // Children by a hash of their tokens; a lookup compares the tokens too, so a hash collision is only a miss.
  std::unordered_map<uint64_t, std::unique_ptr<RadixNode>> children;
};

class RadixCache {
 public:
  RadixCache(BlockPool& pool, int32_t block_size);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  RadixNode* root() { return &root_; }

  struct Match {
    std::vector<int32_t> blocks;  // cached blocks of the prefix, in order; each retained for the caller
    RadixNode* node = nullptr;    // the deepest matched node (the root when nothing matched)
  };
  // The longest prefix of `tokens` made of whole cached blocks, at most `max_blocks` of them.
  Match match(std::span<const int32_t> tokens, int32_t max_blocks);

  struct Inserted {
    RadixNode* node = nullptr;  // the child of `parent` that now caches `tokens`
    int32_t block = -1;         // the block that holds them: `block` itself, or one cached earlier
  };
  // Offers `block`, which holds the KV of `tokens` (one whole block) after the prefix spelled by `parent`. When
  // the tokens are new the cache retains `block`; when they were cached already, the earlier block is returned
  // and retained for the caller, who should use it in place of its own (contents are equal).
  // Returns a null node when a hash collision stops the insertion; the caller keeps its block then.
  Inserted insert(RadixNode* parent, std::span<const int32_t> tokens, int32_t block);

  // Evicts up to `num_blocks` unreferenced leaves, least recently used first; returns how many blocks it freed.
  int32_t evict(int32_t num_blocks);
  int32_t num_cached_blocks() const { return num_nodes_; }
  int32_t block_size() const { return block_size_; }

 private:
  uint64_t hash_tokens(std::span<const int32_t> tokens) const;
  void release_subtree(RadixNode& node);

  BlockPool& pool_;
  int32_t block_size_;
  RadixNode root_;
  int32_t num_nodes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace tern
