#include "engine/host_pool_disk_tier.h"

#include <cstring>

#include "backend/kv_block_transfer.h"
#include "core/error.h"

namespace tern {

HostPoolDiskTier::HostPoolDiskTier(std::vector<ModelRunner*> ranks, const std::string& dir,
                                   const std::string& identity, int64_t capacity_bytes)
    : ranks_(std::move(ranks)) {
  if (ranks_.empty()) fail("KV disk tier: no ranks");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const size_t block_bytes = kv_payload_bytes(ranks_[r]->host_kv_cache(), 1);
    stores_.push_back(std::make_unique<KvDiskStore>(
        dir, identity + "\nrank " + std::to_string(r) + " of " + std::to_string(ranks_.size()), block_bytes,
        capacity_bytes));
  }
}

bool HostPoolDiskTier::contains(const KvBlockKey& key) const {
  for (const auto& store : stores_) {
    if (!store->contains(key)) return false;
  }
  return true;
}

void HostPoolDiskTier::store(const KvBlockKey& key, const KvBlockKey& parent, int32_t group,
                             std::span<const int32_t> tokens, int32_t host_block) {
  const int32_t blocks[] = {host_block};
  for (size_t r = 0; r < ranks_.size(); ++r) {
    ranks_[r]->wait_kv_copies();  // the block's copy from the device may still be on its way
    payload_.resize(stores_[r]->block_bytes());
    copy_kv_blocks_out(ranks_[r]->host_kv_cache(), blocks, payload_.data(),
                       [](const void* memory, void* out, size_t bytes) { std::memcpy(out, memory, bytes); });
    stores_[r]->write(key, parent, group, tokens, payload_.data());
  }
}

bool HostPoolDiskTier::load(const KvBlockKey& key, const KvBlockKey& parent, int32_t group,
                            std::span<const int32_t> tokens, int32_t host_block) {
  const int32_t blocks[] = {host_block};
  for (size_t r = 0; r < ranks_.size(); ++r) {
    // The host block was another's a moment ago; a copy out of it may still be running.
    ranks_[r]->wait_kv_copies();
    payload_.resize(stores_[r]->block_bytes());
    if (!stores_[r]->read(key, parent, group, tokens, payload_.data())) return false;
    copy_kv_blocks_in(ranks_[r]->host_kv_cache(), blocks, {payload_.data(), 1, 0},
                      [](void* memory, const void* in, size_t bytes) { std::memcpy(memory, in, bytes); });
  }
  return true;
}

KvDiskStoreStats HostPoolDiskTier::stats() const {
  KvDiskStoreStats total = stores_.front()->stats();
  for (size_t r = 1; r < stores_.size(); ++r) {
    const KvDiskStoreStats& s = stores_[r]->stats();
    total.num_reads += s.num_reads;
    total.num_read_bytes += s.num_read_bytes;
    total.num_writes += s.num_writes;
    total.num_write_bytes += s.num_write_bytes;
    total.num_corrupt += s.num_corrupt;
    total.read_seconds += s.read_seconds;
    total.write_seconds += s.write_seconds;
  }
  return total;
}

}  // namespace tern
