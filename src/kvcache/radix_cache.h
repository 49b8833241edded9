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
//
// Tiers (SGLang's HiCache): with a host pool, a node may hold each group's block on the device, in host memory, or
// both. A device block evicted without a host copy gets one first (write-back), so it is found again after it left
// the device; a match loads host blocks back (KvCacheManager::match_prefix). The cache only decides: each copy is a
// KvTierCopy the model runner performs, in order, before the next step's compute. A match takes only a prefix held
// without a hole, so a keep-all host block that is the only copy goes leaf first (among the nodes that hold the
// group on the device or the host). Host blocks evicted in turn are written to the disk tier when there is one,
// keyed by the chain hash of their prefix (RadixNode::keys); a node goes once no tier above the disk holds it.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/kv_disk_tier.h"
#include "kvcache/kv_tier_copy.h"

namespace tern {

struct RadixNode {
  RadixNode* parent = nullptr;
  std::vector<int32_t> tokens;  // [block_size] token ids of this node's block; empty at the root
  std::vector<int32_t> blocks;  // per KV cache group: the block of these tokens, or kNoBlock where it was dropped
  std::vector<int32_t> host_blocks;  // per group: the host pool's copy, or kNoBlock
  std::vector<KvBlockKey> keys;      // per group: the chain hash of the prefix this node ends (the disk tier's key)
  uint64_t last_access = 0;
  int32_t num_sequences = 0;  // sequences whose cached path ends here (SequenceBlocks::cached_node)
  // Device and host blocks in this node's subtree, itself included: eviction visits only the subtrees that hold
  // some (a large host tier's nodes would otherwise make every device eviction walk them all).
  int32_t num_device_blocks_below = 0;
  int32_t num_host_blocks_below = 0;
  // Children by a hash of their tokens; a lookup compares the tokens too, so a hash collision is only a miss.
  std::unordered_map<uint64_t, std::unique_ptr<RadixNode>> children;
};

class RadixCache {
 public:
  // One entry of `group_is_sliding` per KV cache group: whether the group's blocks may be dropped from inner nodes.
  // `host_pool`: the host tier's blocks (null: none); `disk`: the tier below it (null: none; needs a host pool).
  RadixCache(BlockPool& pool, int32_t block_size, std::vector<bool> group_is_sliding = {false},
             BlockPool* host_pool = nullptr, KvDiskTier* disk = nullptr);
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

  // Evicts device blocks referenced only by the cache, least recently used nodes first, until `num_blocks` are
  // freed or none is left; returns how many blocks it freed. With a host pool each keeps a host copy (written back
  // now where it had none) as far as the host pool has room.
  int32_t evict(int32_t num_blocks);
  // The same for host blocks no pending copy uses; each goes to the disk tier first where there is one.
  int32_t evict_host(int32_t num_blocks);

  bool has_host_tier() const { return host_pool_ != nullptr; }
  KvDiskTier* disk_tier() const { return disk_; }
  // Gives `node` a host copy of its device block of `group` where it has none (a KvTierCopy to the host); false
  // when the host pool has no block to spare.
  bool offload(RadixNode& node, int32_t group);
  // Makes `device_block` (freshly allocated, referenced by the caller) `node`'s block of `group`, filled from its
  // host copy by a KvTierCopy to the device; the cache takes a reference of its own.
  void load(RadixNode& node, int32_t group, int32_t device_block);
  // The node of `tokens` after `parent`, created without blocks where the tree lacks it (for blocks found in the
  // disk tier); null on a hash collision.
  RadixNode* child(RadixNode* parent, std::span<const int32_t> tokens);
  // Makes `host_block` (allocated by the caller, who keeps its reference until take_copies) `node`'s host copy of
  // `group`.
  void adopt_host_block(RadixNode& node, int32_t group, int32_t host_block);
  // Keeps a host block from eviction until take_copies (a pending copy or disk read uses it).
  void pin_host_block(int32_t host_block);
  // The copies decided since the last call, in the order they must run; unpins the host blocks they use.
  std::vector<KvTierCopy> take_copies();
  // Whether `node`'s data of `group` is in some tier: a device or host block, or a disk record.
  bool holds(const RadixNode& node, int32_t group) const;
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
  // Whether the cache may drop `node`'s host block of `group` now (see the tiers above).
  bool can_evict_host(const RadixNode& node, int32_t group) const;
  // Whether a child of `node` holds group `group`'s data on the device or the host.
  bool child_holds(const RadixNode& node, int32_t group) const;
  void drop_host_block(RadixNode& node, int32_t group);
  // Adds to the block counts of `node` and its ancestors.
  void count_blocks(RadixNode* node, int32_t device_blocks, int32_t host_blocks);
  // Evicts LRU-first the blocks `can_drop` allows, by `drop`, among the subtrees `holds_some` is true of; returns
  // how many.
  int32_t evict_where(int32_t num_blocks, const std::function<bool(const RadixNode&)>& holds_some,
                      const std::function<bool(const RadixNode&, int32_t)>& can_drop,
                      const std::function<bool(RadixNode&, int32_t)>& drop);
  bool is_unused(const RadixNode& node) const;
  // Removes `node` and then its ancestors while unused; returns the first node kept (the root at most).
  RadixNode* remove_unused(RadixNode* node);

  BlockPool& pool_;
  BlockPool* host_pool_ = nullptr;
  KvDiskTier* disk_ = nullptr;
  std::vector<KvTierCopy> copies_;
  std::vector<int32_t> pinned_host_blocks_;
  int32_t block_size_;
  std::vector<bool> group_is_sliding_;
  RadixNode root_;
  int32_t num_nodes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace tern
