#pragma once
// The prefix cache: a radix tree over token ids whose edges are whole KV blocks (SGLang's RadixAttention with a
// page size of one block). A path from the root spells a token prefix; each node owns one reference to each KV
// cache group's block holding the KV of its block_size tokens. A new request walks the tree to reuse the longest
// cached prefix, including earlier turns of its conversation; blocks referenced only by the cache are evicted
// least recently used first when the pool runs short.
//
// Invariants that make eviction simple: a sequence's table of a group that keeps every block (full attention) is
// a path of cached blocks from the root followed by blocks of its own, so a node whose keep-all block a sequence
// references has all its ancestors' referenced too, and such blocks referenced only by the cache can be evicted
// leaf first. A sliding-window group's block is read only by prefixes that end within a window after it, so the
// cache may drop it from any node (a hit then ends before that node, see KvCacheManager::match_prefix). A node
// goes once it holds no block, has no children and no sequence's table hangs from it.
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
  std::vector<int32_t> blocks;  // per KV cache group: the block of these tokens, or kNoBlock where it was dropped
  uint64_t last_access = 0;
  int32_t num_sequences = 0;  // sequences whose cached path ends here (SequenceBlocks::cached_node)
  // Children by a hash of their tokens; a lookup compares the tokens too, so a hash collision is only a miss.
  std::unordered_map<uint64_t, std::unique_ptr<RadixNode>> children;
};

class RadixCache {
 public:
  // One entry of `group_is_sliding` per KV cache group: whether the group's blocks may be dropped from inner nodes.
  RadixCache(BlockPool& pool, int32_t block_size, std::vector<bool> group_is_sliding = {false});
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  RadixNode* root() { return &root_; }
  int32_t num_groups() const { return static_cast<int32_t>(group_is_sliding_.size()); }

  // The nodes spelling the longest prefix of `tokens` in whole blocks, at most `max_blocks` of them, in order
  // (marked as used now). Their blocks are not retained: the caller retains those it keeps.
  std::vector<RadixNode*> match(std::span<const int32_t> tokens, int32_t max_blocks);

  // Offers `blocks` (one per group, kNoBlock for a group that holds none), which hold the KV of `tokens` (one whole
  // block) after the prefix spelled by `parent`. The cache retains each block of a group it lacks there; where it
  // holds one already, it writes that block into `blocks`, retained for the caller, who should release its own and
  // use the cached one (contents are equal). Returns the node of `tokens`, or null when a hash collision stops the
  // insertion; the caller keeps its blocks then.
  RadixNode* insert(RadixNode* parent, std::span<const int32_t> tokens, std::span<int32_t> blocks);

  // Evicts blocks referenced only by the cache, least recently used nodes first, until `num_blocks` are freed or
  // none is left; returns how many blocks it freed.
  int32_t evict(int32_t num_blocks);
  // Removes `node` and then its ancestors while they hold no block, have no children and no sequence.
  void prune(RadixNode* node);
  int32_t num_nodes() const { return num_nodes_; }
  int32_t block_size() const { return block_size_; }

 private:
  uint64_t hash_tokens(std::span<const int32_t> tokens) const;
  void release_subtree(RadixNode& node);
  void drop_block(RadixNode& node, int32_t group);
  // Whether the cache may evict `node`'s block of `group` now: only the cache references it, and it is a sliding
  // group's or `node` is a leaf.
  bool can_evict(const RadixNode& node, int32_t group) const;
  bool has_evictable_block(const RadixNode& node) const;
  bool is_unused(const RadixNode& node) const;
  // Removes `node` and then its ancestors while unused; returns the first node kept (the root at most).
  RadixNode* remove_unused(RadixNode* node);

  BlockPool& pool_;
  int32_t block_size_;
  std::vector<bool> group_is_sliding_;
  RadixNode root_;
  int32_t num_nodes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace tern
