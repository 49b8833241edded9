#include "tokenizer/string_id_map.h"

#include <functional>

namespace tern {

uint64_t StringIdMap::hash_of(std::string_view key) {
  // std::hash's low bits pick the slot; mixing spreads them so that the high bits make a useful tag too.
  uint64_t h = std::hash<std::string_view>{}(key);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

void StringIdMap::build(const std::vector<std::string>& strings, const std::vector<bool>& present) {
  strings_ = &strings;
  std::size_t capacity = 16;
  while (capacity < strings.size() * 2) capacity <<= 1;
  slots_.assign(capacity, Slot{0, -1});
  mask_ = capacity - 1;
  for (std::size_t id = 0; id < strings.size(); ++id) {
    if (!present[id]) continue;
    const uint64_t hash = hash_of(strings[id]);
    std::size_t i = hash & mask_;
    while (slots_[i].id >= 0 && strings[slots_[i].id] != strings[id]) i = (i + 1) & mask_;
    slots_[i] = Slot{static_cast<uint32_t>(hash >> 32), static_cast<int32_t>(id)};  // a repeated string keeps the last id
  }
}

}  // namespace tern
