#pragma once
// Whole KV blocks of every layer as host bytes, for moving a prompt's KV from one engine to another (prefill/decode
// disaggregation). The bytes describe themselves: a header with the layer count, the block size and each layer's
// bytes per block, then for each block, for each layer, its key rows, value rows and state rows as the cache stores
// them. An importer whose cache is shaped differently (another model, dtype or block size) gets a clear error.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/kv_cache.h"

namespace tern {

// Bytes one block of layer `layer` takes (keys, values and states together).
int64_t kv_block_bytes(const KvCache& cache, int layer);

// Copy one contiguous run of a cache tensor (device or host memory) to host memory, and back.
using KvSegmentRead = std::function<void(const void* cache_memory, uint8_t* host, size_t bytes)>;
using KvSegmentWrite = std::function<void(void* cache_memory, const uint8_t* host, size_t bytes)>;

// Header plus payload of `blocks`, reading each segment of the cache with `read` (cache -> host).
std::vector<uint8_t> export_kv_blocks_with(const KvCache& cache, std::span<const int32_t> blocks,
                                           const KvSegmentRead& read);
// Throws tern::Error naming the difference when the export's header (layers, block size, bytes per block) or
// size does not fit `cache`.
void check_kv_export_fits(const KvCache& cache, std::span<const uint8_t> bytes);
// Checks the header against `cache` and `blocks` (throws tern::Error naming the mismatch), then writes each
// block's payload into the cache with `write` (host -> cache).
void import_kv_blocks_with(KvCache& cache, std::span<const int32_t> blocks, std::span<const uint8_t> bytes,
                           const KvSegmentWrite& write);
// How many blocks an export holds, from its header (throws tern::Error when it is not one).
int32_t kv_blocks_in_export(std::span<const uint8_t> bytes);
// Blocks [begin, begin + count) of an export, as an export of their own.
std::vector<uint8_t> slice_kv_blocks(std::span<const uint8_t> bytes, int32_t begin, int32_t count);

}  // namespace tern
