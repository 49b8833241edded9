#pragma once
// Whole KV blocks of every layer in one self-describing layout, for moving a prompt's KV from one engine to another
// (prefill/decode disaggregation). An export is a header (the layer count, the block size, each layer's bytes per
// block and the block count) followed by the payload: for each layer, its key rows of every block in order, then
// its value rows, then its state rows, as the cache stores them. Laid out so, the rows of consecutive cache blocks
// are one run on both sides and move in one copy (a prompt's blocks are mostly consecutive). The payload may live
// apart from its header (in a shared buffer, see shared_buffer.h). An importer whose cache is shaped differently
// (another model, dtype or block size) gets a clear error.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/kv_cache.h"

namespace tern {

// Bytes one block of layer `layer` takes (keys, values and states together).
int64_t kv_block_bytes(const KvCache& cache, int layer);
// Bytes of the payload of `num_blocks` blocks of `cache`.
size_t kv_payload_bytes(const KvCache& cache, size_t num_blocks);

// The header of an export of `num_blocks` blocks of `cache`.
std::vector<uint8_t> kv_export_header(const KvCache& cache, int32_t num_blocks);
// Bytes of the header that `bytes` starts with (throws tern::Error when it does not start with one).
size_t kv_header_bytes(std::span<const uint8_t> bytes);
// Throws tern::Error naming the difference when the header `bytes` starts with (layers, block size, bytes per
// block) does not fit `cache`.
void check_kv_header_fits(const KvCache& cache, std::span<const uint8_t> bytes);
// The same, and the whole export's size must match its block count.
void check_kv_export_fits(const KvCache& cache, std::span<const uint8_t> bytes);
// How many blocks an export holds, from its header (throws tern::Error when it is not one).
int32_t kv_blocks_in_export(std::span<const uint8_t> bytes);

// A payload of `num_blocks` blocks at `data`, of which an import reads blocks [first_block, first_block + n).
struct KvPayloadView {
  const void* data = nullptr;
  int32_t num_blocks = 0;
  int32_t first_block = 0;
};

// Copy one contiguous run of a cache tensor out to the payload's memory, and back; each backend knows which
// memories its pointers may address (host, device, a shared buffer).
using KvSegmentRead = std::function<void(const void* cache_memory, void* payload, size_t bytes)>;
using KvSegmentWrite = std::function<void(void* cache_memory, const void* payload, size_t bytes)>;

// Writes the payload of `blocks` to `payload` (kv_payload_bytes of them), reading each run with `read`.
void copy_kv_blocks_out(const KvCache& cache, std::span<const int32_t> blocks, void* payload,
                        const KvSegmentRead& read);
// Writes blocks [payload.first_block, + blocks.size()) of the payload into `blocks` of the cache with `write`.
void copy_kv_blocks_in(KvCache& cache, std::span<const int32_t> blocks, const KvPayloadView& payload,
                       const KvSegmentWrite& write);

// Copies blocks `from_blocks` of `from` into blocks `to_blocks` of `to`, two caches of the same layers and block
// size (a device cache and its host tier's twin), layer by layer: `copy` gets each run of blocks consecutive on both
// sides, `layer_done` each layer once its runs are issued. Throws tern::Error naming a block outside a cache or a
// layer the caches store differently.
using KvSegmentCopy = std::function<void(void* to_memory, const void* from_memory, size_t bytes)>;
// The checks copy_kv_cache_blocks makes, for a backend that copies the blocks its own way.
void check_kv_cache_copy(const KvCache& from, std::span<const int32_t> from_blocks, const KvCache& to,
                         std::span<const int32_t> to_blocks);
void copy_kv_cache_blocks(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to,
                          std::span<const int32_t> to_blocks, const KvSegmentCopy& copy,
                          const std::function<void(int layer)>& layer_done = {});

}  // namespace tern
