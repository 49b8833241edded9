#include "kvcache/radix_cache.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <queue>
#include <unordered_set>

#include "core/error.h"

namespace tern {

RadixCache::RadixCache(BlockPool& pool, int32_t block_size, std::vector<bool> group_is_sliding, BlockPool* host_pool,
                       KvDiskTier* disk)
    : pool_(pool),
      host_pool_(host_pool),
      disk_(disk),
      block_size_(block_size),
      group_is_sliding_(std::move(group_is_sliding)) {
  if (block_size <= 0) fail("radix cache: block size must be positive, got {}", block_size);
  if (group_is_sliding_.empty()) fail("radix cache: needs at least one KV cache group");
  if (disk_ && !host_pool_) fail("radix cache: a disk tier needs a host tier above it");
  root_.keys.assign(group_is_sliding_.size(), KvBlockKey{});
}

RadixCache::~RadixCache() { release_subtree(root_); }

void RadixCache::release_subtree(RadixNode& node) {
  for (auto& [hash, child] : node.children) {
    release_subtree(*child);
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (child->blocks[g] != kNoBlock) drop_block(*child, g);
      if (child->host_blocks[g] != kNoBlock) drop_host_block(*child, g);
    }
  }
  node.children.clear();
}

void RadixCache::drop_host_block(RadixNode& node, int32_t group) {
  host_pool_->set_cached(node.host_blocks[group], false);
  host_pool_->release(node.host_blocks[group]);
  node.host_blocks[group] = kNoBlock;
  count_blocks(&node, 0, -1);
}

void RadixCache::count_blocks(RadixNode* node, int32_t device_blocks, int32_t host_blocks) {
  for (; node; node = node->parent) {
    node->num_device_blocks_below += device_blocks;
    node->num_host_blocks_below += host_blocks;
  }
}

void RadixCache::drop_block(RadixNode& node, int32_t group) {
  pool_.set_cached(node.blocks[group], false);
  pool_.release(node.blocks[group]);
  node.blocks[group] = kNoBlock;
  count_blocks(&node, -1, 0);
}

uint64_t RadixCache::hash_tokens(std::span<const int32_t> tokens) const {
  // FNV-1a over the ids, then a final mix so that nearby ids spread over the whole word.
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : tokens) {
    h ^= static_cast<uint32_t>(id);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::vector<RadixNode*> RadixCache::match(std::span<const int32_t> tokens, int32_t max_blocks) {
  std::vector<RadixNode*> path;
  RadixNode* node = &root_;
  const int32_t num_whole = static_cast<int32_t>(tokens.size() / block_size_);
  const int32_t limit = std::min(num_whole, max_blocks);
  ++clock_;
  for (int32_t b = 0; b < limit; ++b) {
    const auto key = tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_);
    const auto it = node->children.find(hash_tokens(key));
    if (it == node->children.end() || !std::equal(key.begin(), key.end(), it->second->tokens.begin())) break;
    node = it->second.get();
    node->last_access = clock_;
    path.push_back(node);
  }
  return path;
}

RadixNode* RadixCache::insert(RadixNode* parent, std::span<const int32_t> tokens, std::span<int32_t> blocks) {
  if (static_cast<int32_t>(tokens.size()) != block_size_) {
    fail("radix cache: inserting {} tokens, expected one block of {}", tokens.size(), block_size_);
  }
  if (static_cast<int32_t>(blocks.size()) != num_groups()) {
    fail("radix cache: inserting {} blocks for {} KV cache groups", blocks.size(), num_groups());
  }
  RadixNode* found = child(parent, tokens);
  if (!found) return nullptr;
  RadixNode& node = *found;
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (blocks[g] == kNoBlock) continue;
    if (node.blocks[g] == kNoBlock) {
      node.blocks[g] = blocks[g];
      pool_.retain(blocks[g]);
      pool_.set_cached(blocks[g], true);
      count_blocks(&node, 1, 0);
    } else if (node.blocks[g] != blocks[g]) {
      pool_.retain(node.blocks[g]);
      blocks[g] = node.blocks[g];
    }
  }
  return &node;
}

RadixNode* RadixCache::child(RadixNode* parent, std::span<const int32_t> tokens) {
  if (static_cast<int32_t>(tokens.size()) != block_size_) {
    fail("radix cache: a node of {} tokens, expected one block of {}", tokens.size(), block_size_);
  }
  const uint64_t hash = hash_tokens(tokens);
  ++clock_;
  auto [it, inserted] = parent->children.try_emplace(hash);
  if (inserted) {
    auto node = std::make_unique<RadixNode>();
    node->parent = parent;
    node->tokens.assign(tokens.begin(), tokens.end());
    node->blocks.assign(num_groups(), kNoBlock);
    node->host_blocks.assign(num_groups(), kNoBlock);
    for (int32_t g = 0; g < num_groups(); ++g) node->keys.push_back(chain_block_key(parent->keys[g], g, tokens));
    it->second = std::move(node);
    ++num_nodes_;
  } else if (!std::equal(tokens.begin(), tokens.end(), it->second->tokens.begin())) {
    return nullptr;
  }
  it->second->last_access = clock_;
  return it->second.get();
}

bool RadixCache::child_holds(const RadixNode& node, int32_t group) const {
  return std::any_of(node.children.begin(), node.children.end(), [&](const auto& entry) {
    return entry.second->blocks[group] != kNoBlock || entry.second->host_blocks[group] != kNoBlock;
  });
}

bool RadixCache::holds(const RadixNode& node, int32_t group) const {
  return node.blocks[group] != kNoBlock || node.host_blocks[group] != kNoBlock ||
         (disk_ && disk_->contains(node.keys[group]));
}

bool RadixCache::can_evict(const RadixNode& node, int32_t group) const {
  const int32_t block = node.blocks[group];
  // With a host tier the block keeps (or gets) a copy there; without, a keep-all block goes leaf first.
  return block != kNoBlock && pool_.ref_count(block) == 1 &&
         (group_is_sliding_[group] || host_pool_ || !child_holds(node, group));
}

bool RadixCache::can_evict_host(const RadixNode& node, int32_t group) const {
  const int32_t block = node.host_blocks[group];
  return block != kNoBlock && host_pool_->ref_count(block) == 1 &&
         (group_is_sliding_[group] || disk_ || node.blocks[group] != kNoBlock || !child_holds(node, group));
}

bool RadixCache::is_unused(const RadixNode& node) const {
  const auto none = [](const std::vector<int32_t>& blocks) {
    return std::all_of(blocks.begin(), blocks.end(), [](int32_t b) { return b == kNoBlock; });
  };
  return &node != &root_ && node.children.empty() && node.num_sequences == 0 && none(node.blocks) &&
         none(node.host_blocks);
}

RadixNode* RadixCache::remove_unused(RadixNode* node) {
  while (is_unused(*node)) {
    RadixNode* parent = node->parent;
    parent->children.erase(hash_tokens(node->tokens));
    --num_nodes_;
    node = parent;
  }
  return node;
}

void RadixCache::prune(RadixNode* node) { remove_unused(node); }

int32_t RadixCache::evict_where(int32_t num_blocks, const std::function<bool(const RadixNode&)>& holds_some,
                                const std::function<bool(const RadixNode&, int32_t)>& can_drop,
                                const std::function<bool(RadixNode&, int32_t)>& drop) {
  using Entry = std::pair<uint64_t, RadixNode*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> candidates;
  // The nodes in `candidates`: each at most once, so that none is popped after its removal.
  std::unordered_set<RadixNode*> queued;
  const auto enqueue = [&](RadixNode* node) {
    if (node == &root_ || queued.contains(node)) return;
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (!can_drop(*node, g)) continue;
      queued.insert(node);
      candidates.emplace(node->last_access, node);
      return;
    }
  };
  std::vector<RadixNode*> stack{&root_};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    enqueue(node);
    for (auto& [hash, child] : node->children) {
      if (holds_some(*child)) stack.push_back(child.get());
    }
  }
  int32_t freed = 0;
  while (freed < num_blocks && !candidates.empty()) {
    RadixNode* node = candidates.top().second;
    candidates.pop();
    queued.erase(node);
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (can_drop(*node, g) && drop(*node, g)) ++freed;
    }
    // Dropping a child's block can make its parent's droppable.
    RadixNode* kept = remove_unused(node);
    enqueue(kept);
    if (kept == node) enqueue(node->parent);
  }
  return freed;
}

int32_t RadixCache::evict(int32_t num_blocks) {
  if (num_blocks <= 0 || pool_.num_cached_idle_blocks() == 0) return 0;
  // Room for the write-backs first, in one pass over the tree rather than one per block.
  if (host_pool_ && host_pool_->num_free_blocks() < num_blocks) {
    evict_host(num_blocks - host_pool_->num_free_blocks());
  }
  return evict_where(
      num_blocks, [](const RadixNode& node) { return node.num_device_blocks_below > 0; },
      [&](const RadixNode& node, int32_t g) { return can_evict(node, g); },
      [&](RadixNode& node, int32_t g) {
        // A block the host pool has no room for is lost; a match then stops before it (its descendants are
        // unreachable until they are evicted in turn).
        offload(node, g);
        drop_block(node, g);
        return true;
      });
}

int32_t RadixCache::evict_host(int32_t num_blocks) {
  if (!host_pool_ || num_blocks <= 0 || host_pool_->num_cached_idle_blocks() == 0) return 0;
  return evict_where(
      num_blocks, [](const RadixNode& node) { return node.num_host_blocks_below > 0; },
      [&](const RadixNode& node, int32_t g) { return can_evict_host(node, g); },
      [&](RadixNode& node, int32_t g) {
        if (disk_ && !disk_->contains(node.keys[g])) {
          disk_->store(node.keys[g], node.parent->keys[g], g, node.tokens, node.host_blocks[g]);
        }
        drop_host_block(node, g);
        return true;
      });
}

bool RadixCache::offload(RadixNode& node, int32_t group) {
  if (!host_pool_ || node.blocks[group] == kNoBlock) return false;
  if (node.host_blocks[group] != kNoBlock) return true;
  std::optional<int32_t> host_block = host_pool_->allocate();
  if (!host_block && evict_host(1) > 0) host_block = host_pool_->allocate();
  if (!host_block) return false;
  adopt_host_block(node, group, *host_block);  // the allocation's reference pins it until its copy is taken
  copies_.push_back({KvTierCopy::Direction::kToHost, node.blocks[group], *host_block});
  return true;
}

void RadixCache::load(RadixNode& node, int32_t group, int32_t device_block) {
  if (node.blocks[group] != kNoBlock || node.host_blocks[group] == kNoBlock) {
    fail("radix cache: loading group {} of a node that holds device block {} and host block {}", group,
         node.blocks[group], node.host_blocks[group]);
  }
  node.blocks[group] = device_block;
  pool_.retain(device_block);
  pool_.set_cached(device_block, true);
  count_blocks(&node, 1, 0);
  copies_.push_back({KvTierCopy::Direction::kToDevice, device_block, node.host_blocks[group]});
  pin_host_block(node.host_blocks[group]);
}

void RadixCache::adopt_host_block(RadixNode& node, int32_t group, int32_t host_block) {
  if (node.host_blocks[group] != kNoBlock) fail("radix cache: group {} of the node has a host block already", group);
  node.host_blocks[group] = host_block;
  host_pool_->retain(host_block);
  host_pool_->set_cached(host_block, true);
  count_blocks(&node, 0, 1);
  pinned_host_blocks_.push_back(host_block);
}

void RadixCache::pin_host_block(int32_t host_block) {
  host_pool_->retain(host_block);
  pinned_host_blocks_.push_back(host_block);
}

std::vector<KvTierCopy> RadixCache::take_copies() {
  for (int32_t block : pinned_host_blocks_) host_pool_->release(block);
  pinned_host_blocks_.clear();
  return std::exchange(copies_, {});
}

}  // namespace tern
