#pragma once
// How many KV blocks fit a memory budget, given what the storage behind one token slot of a block costs (all layers
// of a model of one KV cache group; one group's layers where the groups share storage, kv_bytes_per_token).
#include <cstdint>
#include <string>

namespace tern {

struct KvCacheBudget {
  int64_t bytes_per_token = 0;  // storage behind one token slot of a block: keys, values and layer state
  int32_t block_size = 0;       // tokens per block
  int32_t num_blocks = 0;

  int64_t bytes_per_block() const { return bytes_per_token * block_size; }
  int64_t num_tokens() const { return static_cast<int64_t>(num_blocks) * block_size; }
  int64_t total_bytes() const { return bytes_per_block() * num_blocks; }
};

// The largest pool of `block_size`-token blocks within `memory_bytes`. Fails (naming the sizes) when not even one
// block fits.
KvCacheBudget kv_cache_budget_for_memory(int64_t bytes_per_token, int32_t block_size, int64_t memory_bytes);

// Bytes of host memory the kernel reports as available (MemAvailable in /proc/meminfo); the CPU backend's
// "device memory" for a fractional budget.
int64_t host_available_memory_bytes();

// "2GiB", "512MiB", "1.5GB", "4096": a byte count with an optional binary (KiB, MiB, GiB, TiB) or decimal (KB, MB,
// GB, TB) unit. Fails naming `what` on anything else.
int64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace tern
