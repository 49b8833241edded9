#pragma once
// The BPE merge table: (left id, right id) -> (rank, merged id), as an open-addressing hash table. It is looked
// up for every adjacent pair of every word, so it avoids the pointer chasing of std::unordered_map.
#include <cstdint>
#include <optional>
#include <vector>

namespace tern {

struct Merge {
  int32_t rank;       // position in tokenizer.json's merges list; lower merges first
  int32_t merged_id;  // the token the pair becomes
};

class MergeTable {
 public:
  void reserve(std::size_t num_merges);
  // A pair already present is overwritten, as Hugging Face's HashMap collect does.
  void insert(int32_t left, int32_t right, Merge merge);
  std::optional<Merge> find(int32_t left, int32_t right) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t key = make_key(left, right);
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return slot.merge;
      if (slot.key == kEmpty) return std::nullopt;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t make_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  std::size_t slot_of(uint64_t key) const { return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow();

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace tern
