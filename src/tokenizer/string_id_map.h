#pragma once
// A read-only hash map from token strings to ids over a vector of strings owned elsewhere (the vocabulary), as
// one flat array of slots. Loading the vocabulary does hundreds of thousands of lookups (every merge names three
// tokens), and a flat table keeps that to about one cache miss per lookup.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tern {

class StringIdMap {
 public:
  // Maps strings[id] -> id for every id where present[id]; `strings` must outlive the map and not change.
  void build(const std::vector<std::string>& strings, const std::vector<bool>& present);

  std::optional<int32_t> find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t hash = hash_of(key);
    const auto tag = static_cast<uint32_t>(hash >> 32);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return std::nullopt;
      if (slot.tag == tag && (*strings_)[slot.id] == key) return slot.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;  // high half of the hash, to skip most string comparisons
    int32_t id;    // -1: empty
  };
  static uint64_t hash_of(std::string_view key);

  const std::vector<std::string>* strings_ = nullptr;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
};

}  // namespace tern
