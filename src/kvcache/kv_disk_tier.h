#pragma once
// The disk tier as the prefix cache sees it: host blocks written to files and read back into host blocks, by the
// chain hash of their token prefix. The engine implements it over each rank's host pool and KvDiskStore (only it
// reaches the host pool's memory); tests implement it in memory.
#include <cstdint>
#include <span>

#include "kvcache/kv_disk_store.h"

namespace tern {

class KvDiskTier {
 public:
  virtual ~KvDiskTier() = default;
  virtual bool contains(const KvBlockKey& key) const = 0;
  // Writes host block `host_block`, which holds group `group`'s KV of `tokens` after the prefix of key `parent`.
  virtual void store(const KvBlockKey& key, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens,
                     int32_t host_block) = 0;
  // Reads the block of `key` into host block `host_block`; false when it is not held or its record no longer
  // checks out (it is gone from the tier then).
  virtual bool load(const KvBlockKey& key, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens,
                    int32_t host_block) = 0;
};

}  // namespace tern
