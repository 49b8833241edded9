#include "kvcache/radix_cache.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "core/error.h"

namespace tern {

RadixCache::RadixCache(BlockPool& pool, int32_t block_size, std::vector<bool> group_is_sliding)
    : pool_(pool), block_size_(block_size), group_is_sliding_(std::move(group_is_sliding)) {
  if (block_size <= 0) fail("radix cache: block size must be positive, got {}", block_size);
  if (group_is_sliding_.empty()) fail("radix cache: needs at least one KV cache group");
}

RadixCache::~RadixCache() { release_subtree(root_); }

void RadixCache::release_subtree(RadixNode& node) {
  for (auto& [hash, child] : node.children) {
    release_subtree(*child);
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (child->blocks[g] != kNoBlock) drop_block(*child, g);
    }
  }
  node.children.clear();
}

void RadixCache::drop_block(RadixNode& node, int32_t group) {
  pool_.set_cached(node.blocks[group], false);
  pool_.release(node.blocks[group]);
  node.blocks[group] = kNoBlock;
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
  const uint64_t hash = hash_tokens(tokens);
  ++clock_;
  auto [it, inserted] = parent->children.try_emplace(hash);
  if (inserted) {
    it->second = std::make_unique<RadixNode>();
    it->second->parent = parent;
    it->second->tokens.assign(tokens.begin(), tokens.end());
    it->second->blocks.assign(num_groups(), kNoBlock);
    ++num_nodes_;
  } else if (!std::equal(tokens.begin(), tokens.end(), it->second->tokens.begin())) {
    return nullptr;
  }
  RadixNode& node = *it->second;
  node.last_access = clock_;
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (blocks[g] == kNoBlock) continue;
    if (node.blocks[g] == kNoBlock) {
      node.blocks[g] = blocks[g];
      pool_.retain(blocks[g]);
      pool_.set_cached(blocks[g], true);
    } else if (node.blocks[g] != blocks[g]) {
      pool_.retain(node.blocks[g]);
      blocks[g] = node.blocks[g];
    }
  }
  return &node;
}

bool RadixCache::can_evict(const RadixNode& node, int32_t group) const {
  const int32_t block = node.blocks[group];
  return block != kNoBlock && pool_.ref_count(block) == 1 && (group_is_sliding_[group] || node.children.empty());
}

bool RadixCache::has_evictable_block(const RadixNode& node) const {
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (can_evict(node, g)) return true;
  }
  return false;
}

bool RadixCache::is_unused(const RadixNode& node) const {
  return &node != &root_ && node.children.empty() && node.num_sequences == 0 &&
         std::all_of(node.blocks.begin(), node.blocks.end(), [](int32_t b) { return b == kNoBlock; });
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

int32_t RadixCache::evict(int32_t num_blocks) {
  if (num_blocks <= 0 || pool_.num_cached_idle_blocks() == 0) return 0;
  using Entry = std::pair<uint64_t, RadixNode*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> candidates;
  // The nodes in `candidates`: each at most once, so that none is popped after its removal.
  std::unordered_set<RadixNode*> queued;
  const auto enqueue = [&](RadixNode* node) {
    if (node != &root_ && has_evictable_block(*node) && queued.insert(node).second) {
      candidates.emplace(node->last_access, node);
    }
  };
  std::vector<RadixNode*> stack{&root_};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    enqueue(node);
    for (auto& [hash, child] : node->children) stack.push_back(child.get());
  }
  int32_t freed = 0;
  while (freed < num_blocks && !candidates.empty()) {
    RadixNode* node = candidates.top().second;
    candidates.pop();
    queued.erase(node);
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (!can_evict(*node, g)) continue;
      drop_block(*node, g);
      ++freed;
    }
    // Removing a leaf can make its parent's keep-all blocks evictable.
    enqueue(remove_unused(node));
  }
  return freed;
}

}  // namespace tern
