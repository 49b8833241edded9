#include "kvcache/block_pool.h"

#include "core/error.h"

namespace tern {

BlockPool::BlockPool(int32_t num_blocks) {
  if (num_blocks <= 0) fail("block pool: needs at least one block, got {}", num_blocks);
  ref_counts_.assign(num_blocks, 0);
  cached_.assign(num_blocks, 0);
  free_blocks_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
}

void BlockPool::check(int32_t block, const char* what) const {
  if (block < 0 || block >= num_blocks()) fail("block pool: {} of block {} outside [0, {})", what, block, num_blocks());
  if (ref_counts_[block] <= 0) fail("block pool: {} of free block {}", what, block);
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_blocks_.empty()) return std::nullopt;
  const int32_t block = free_blocks_.back();
  free_blocks_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

void BlockPool::retain(int32_t block) {
  check(block, "retain");
  if (is_cached_idle(block)) --num_cached_idle_;
  ++ref_counts_[block];
}

void BlockPool::release(int32_t block) {
  check(block, "release");
  if (is_cached_idle(block)) --num_cached_idle_;
  if (--ref_counts_[block] == 0) {
    cached_[block] = 0;
    free_blocks_.push_back(block);
  } else if (is_cached_idle(block)) {
    ++num_cached_idle_;
  }
}

void BlockPool::set_cached(int32_t block, bool cached) {
  check(block, "set_cached");
  if (is_cached_idle(block)) --num_cached_idle_;
  cached_[block] = cached ? 1 : 0;
  if (is_cached_idle(block)) ++num_cached_idle_;
}

}  // namespace tern
