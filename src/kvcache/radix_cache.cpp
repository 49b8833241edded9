#include "kvcache/radix_cache.h"

#include <algorithm>
#include <queue>

#include "core/error.h"

namespace tern {

RadixCache::RadixCache(BlockPool& pool, int32_t block_size) : pool_(pool), block_size_(block_size) {
  if (block_size <= 0) fail("radix cache: block size must be positive, got {}", block_size);
}

RadixCache::~RadixCache() { release_subtree(root_); }

void RadixCache::release_subtree(RadixNode& node) {
  for (auto& [hash, child] : node.children) {
    release_subtree(*child);
    pool_.set_cached(child->block, false);
    pool_.release(child->block);
  }
  node.children.clear();
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

RadixCache::Match RadixCache::match(std::span<const int32_t> tokens, int32_t max_blocks) {
  Match result;
  result.node = &root_;
  const int32_t num_whole = static_cast<int32_t>(tokens.size() / block_size_);
  const int32_t limit = std::min(num_whole, max_blocks);
  ++clock_;
  for (int32_t b = 0; b < limit; ++b) {
    const auto key = tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_);
    const auto it = result.node->children.find(hash_tokens(key));
    if (it == result.node->children.end() || !std::equal(key.begin(), key.end(), it->second->tokens.begin())) break;
    RadixNode* child = it->second.get();
    child->last_access = clock_;
    pool_.retain(child->block);
    result.blocks.push_back(child->block);
    result.node = child;
  }
  return result;
}

RadixCache::Inserted RadixCache::insert(RadixNode* parent, std::span<const int32_t> tokens, int32_t block) {
  if (static_cast<int32_t>(tokens.size()) != block_size_) {
    fail("radix cache: inserting {} tokens, expected one block of {}", tokens.size(), block_size_);
  }
  const uint64_t hash = hash_tokens(tokens);
  ++clock_;
  auto [it, inserted] = parent->children.try_emplace(hash);
  if (!inserted) {
    RadixNode* existing = it->second.get();
    if (!std::equal(tokens.begin(), tokens.end(), existing->tokens.begin())) return {};
    existing->last_access = clock_;
    if (existing->block != block) pool_.retain(existing->block);
    return {existing, existing->block};
  }
  auto node = std::make_unique<RadixNode>();
  node->parent = parent;
  node->tokens.assign(tokens.begin(), tokens.end());
  node->block = block;
  node->last_access = clock_;
  pool_.retain(block);
  pool_.set_cached(block, true);
  it->second = std::move(node);
  ++num_nodes_;
  return {it->second.get(), block};
}

int32_t RadixCache::evict(int32_t num_blocks) {
  if (num_blocks <= 0 || pool_.num_cached_idle_blocks() == 0) return 0;
  const auto is_evictable_leaf = [&](const RadixNode* node) {
    return node != &root_ && node->children.empty() && pool_.ref_count(node->block) == 1;
  };
  using Entry = std::pair<uint64_t, RadixNode*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  std::vector<RadixNode*> stack{&root_};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    if (is_evictable_leaf(node)) leaves.emplace(node->last_access, node);
    for (auto& [hash, child] : node->children) stack.push_back(child.get());
  }
  int32_t freed = 0;
  while (freed < num_blocks && !leaves.empty()) {
    RadixNode* node = leaves.top().second;
    leaves.pop();
    RadixNode* parent = node->parent;
    pool_.set_cached(node->block, false);
    pool_.release(node->block);
    parent->children.erase(hash_tokens(node->tokens));
    --num_nodes_;
    ++freed;
    if (is_evictable_leaf(parent)) leaves.emplace(parent->last_access, parent);
  }
  return freed;
}

}  // namespace tern
