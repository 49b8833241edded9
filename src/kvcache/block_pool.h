#pragma once
// A fixed pool of KV cache blocks with reference counts. A block is free when nothing references it; sequences
// and the prefix cache each hold one reference per block they use, so a block shared by a prompt's forks or by a
// cached prefix stays alive until its last user lets go. The pool knows nothing of tokens or architectures.
#include <cstdint>
#include <optional>
#include <vector>

namespace tern {

// A block table's entry for a block a sequence or the prefix cache does not hold (a sliding-window group's block
// before its window).
inline constexpr int32_t kNoBlock = -1;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_blocks_.size()); }
  // Blocks referenced only by the prefix cache: the cache can give them back (see RadixCache::evict).
  int32_t num_cached_idle_blocks() const { return num_cached_idle_; }

  // A free block with a reference count of 1, or nothing when the pool is exhausted.
  std::optional<int32_t> allocate();
  void retain(int32_t block);
  // Drops one reference; the block returns to the free list at zero.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }

  // Marks whether the prefix cache holds a reference to `block` (it counts toward num_cached_idle_blocks when
  // that is its only reference).
  void set_cached(int32_t block, bool cached);
  bool is_cached(int32_t block) const { return cached_.at(block) != 0; }

 private:
  void check(int32_t block, const char* what) const;
  bool is_cached_idle(int32_t block) const { return cached_[block] && ref_counts_[block] == 1; }

  std::vector<int32_t> ref_counts_;
  std::vector<uint8_t> cached_;
  std::vector<int32_t> free_blocks_;  // a stack: recently freed blocks are reused first
  int32_t num_cached_idle_ = 0;
};

}  // namespace tern
