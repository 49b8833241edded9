#include "tokenizer/merge_table.h"

namespace tern {

void MergeTable::reserve(std::size_t num_merges) {
  std::size_t capacity = 16;
  int bits = 4;
  while (capacity < num_merges * 2) capacity <<= 1, ++bits;  // load factor at most 1/2 keeps probes short
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{kEmpty, {}});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != kEmpty) insert(static_cast<int32_t>(slot.key >> 32), static_cast<int32_t>(slot.key), slot.merge);
  }
}

void MergeTable::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }  // reserve(n) sizes for 2n: doubles

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = make_key(left, right);
  for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == key) {
      slot.merge = merge;
      return;
    }
    if (slot.key == kEmpty) {
      slot = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

}  // namespace tern
