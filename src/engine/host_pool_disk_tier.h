#pragma once
// The disk tier under the host pool of one KV cache manager: each rank's host blocks written to that rank's
// KvDiskStore and read back, every rank together (tensor-parallel ranks each keep their heads' share of a block).
// It reaches the host pools' memory through the ranks' model runners, after their pending tier copies finish.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "kvcache/kv_disk_store.h"
#include "kvcache/kv_disk_tier.h"

namespace tern {

class HostPoolDiskTier final : public KvDiskTier {
 public:
  // One store per runner, in `dir`, under `identity` and the rank's index; `capacity_bytes` per rank.
  HostPoolDiskTier(std::vector<ModelRunner*> ranks, const std::string& dir, const std::string& identity,
                   int64_t capacity_bytes);

  bool contains(const KvBlockKey& key) const override;
  void store(const KvBlockKey& key, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens,
             int32_t host_block) override;
  bool load(const KvBlockKey& key, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens,
            int32_t host_block) override;

  // The stores' counts added up (blocks and bytes are the first rank's: every rank holds the same blocks).
  KvDiskStoreStats stats() const;
  const std::string& directory() const { return stores_.front()->directory(); }

 private:
  std::vector<ModelRunner*> ranks_;
  std::vector<std::unique_ptr<KvDiskStore>> stores_;
  std::vector<uint8_t> payload_;  // one block of one rank, on its way to or from a file
};

}  // namespace tern
