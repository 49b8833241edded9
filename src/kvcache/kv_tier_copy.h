#pragma once
// A copy of one KV block between the device pool and the host tier, decided by the prefix cache and performed by
// the model runner before the step's compute reads the block. Copies run in the order given: a block an earlier
// copy moved out may be the target of a later one.
#include <cstdint>

namespace tern {

struct KvTierCopy {
  enum class Direction : uint8_t { kToHost, kToDevice };
  Direction direction = Direction::kToHost;
  int32_t device_block = 0;
  int32_t host_block = 0;

  friend bool operator==(const KvTierCopy&, const KvTierCopy&) = default;
};

}  // namespace tern
