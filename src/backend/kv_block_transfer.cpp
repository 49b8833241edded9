#include "backend/kv_block_transfer.h"

#include <cstring>
#include <utility>

#include "core/error.h"

namespace tern {

namespace {

constexpr uint32_t kMagic = 0x3156'4B54;  // "TKV1" little-endian

struct Header {
  uint32_t magic = kMagic;
  uint32_t num_layers = 0;
  uint32_t block_size = 0;
  uint32_t num_blocks = 0;
};

size_t header_bytes(size_t num_layers) { return sizeof(Header) + num_layers * sizeof(uint64_t); }

// Bytes of one token slot (one row of dimension 0) of a layer's tensor; 0 when the backend keeps no such tensor
// (the CUDA backend has no state rows).
size_t row_bytes(const std::vector<Tensor>& tensors, size_t layer) {
  if (layer >= tensors.size()) return 0;
  const Tensor& t = tensors[layer];
  return static_cast<size_t>(t.row_numel()) * dtype_size(t.dtype);
}

// Calls visit(cache_memory, payload_offset, bytes) for each run of consecutive cache blocks among `blocks`, which
// are blocks [first_payload_block, + blocks.size()) of a payload of `payload_blocks` blocks. Block `b` of a layer's
// tensor is its rows [b * block_size, (b + 1) * block_size).
template <typename Visit>
void for_each_run(const KvCache& cache, std::span<const int32_t> blocks, size_t payload_blocks,
                  size_t first_payload_block, const Visit& visit) {
  size_t section = 0;  // where the current tensor's rows start in the payload
  for (size_t layer = 0; layer < cache.layers.size(); ++layer) {
    for (const auto* tensors : {&cache.keys, &cache.values, &cache.states}) {
      const size_t block_bytes = row_bytes(*tensors, layer) * static_cast<size_t>(cache.block_size);
      if (block_bytes == 0) continue;
      auto* memory = static_cast<char*>((*tensors)[layer].data);
      for (size_t i = 0; i < blocks.size();) {
        size_t end = i + 1;
        while (end < blocks.size() && blocks[end] == blocks[end - 1] + 1) ++end;
        visit(memory + block_bytes * static_cast<size_t>(blocks[i]), section + block_bytes * (first_payload_block + i),
              block_bytes * (end - i));
        i = end;
      }
      section += block_bytes * payload_blocks;
    }
  }
}

void check_blocks(const KvCache& cache, std::span<const int32_t> blocks, const char* what) {
  for (int32_t block : blocks) {
    if (block < 0 || block >= cache.num_blocks) fail("{} KV blocks: block {} outside the cache's {}", what, block, cache.num_blocks);
  }
}

Header read_header(std::span<const uint8_t> bytes) {
  Header header;
  if (bytes.size() < sizeof(Header)) fail("KV block import: {} bytes are too few for a header", bytes.size());
  std::memcpy(&header, bytes.data(), sizeof(Header));
  if (header.magic != kMagic) fail("KV block import: the bytes do not start with a KV block header");
  if (bytes.size() < header_bytes(header.num_layers)) fail("KV block import: header cut short");
  return header;
}

}  // namespace

int64_t kv_block_bytes(const KvCache& cache, int layer) {
  const auto l = static_cast<size_t>(layer);
  return static_cast<int64_t>((row_bytes(cache.keys, l) + row_bytes(cache.values, l) + row_bytes(cache.states, l)) *
                              static_cast<size_t>(cache.block_size));
}

size_t kv_payload_bytes(const KvCache& cache, size_t num_blocks) {
  size_t per_block = 0;
  for (size_t l = 0; l < cache.layers.size(); ++l) per_block += static_cast<size_t>(kv_block_bytes(cache, static_cast<int>(l)));
  return per_block * num_blocks;
}

std::vector<uint8_t> kv_export_header(const KvCache& cache, int32_t num_blocks) {
  const size_t num_layers = cache.layers.size();
  std::vector<uint64_t> layer_bytes(num_layers);
  for (size_t l = 0; l < num_layers; ++l) layer_bytes[l] = static_cast<uint64_t>(kv_block_bytes(cache, static_cast<int>(l)));
  std::vector<uint8_t> out(header_bytes(num_layers));
  const Header header{kMagic, static_cast<uint32_t>(num_layers), static_cast<uint32_t>(cache.block_size),
                      static_cast<uint32_t>(num_blocks)};
  std::memcpy(out.data(), &header, sizeof(Header));
  std::memcpy(out.data() + sizeof(Header), layer_bytes.data(), num_layers * sizeof(uint64_t));
  return out;
}

size_t kv_header_bytes(std::span<const uint8_t> bytes) { return header_bytes(read_header(bytes).num_layers); }

void check_kv_header_fits(const KvCache& cache, std::span<const uint8_t> bytes) {
  const Header header = read_header(bytes);
  if (header.num_layers != cache.layers.size()) {
    fail("KV block import: the blocks have {} layers, this cache {}", header.num_layers, cache.layers.size());
  }
  if (header.block_size != cache.block_size) {
    fail("KV block import: the blocks hold {} tokens each, this cache's {}", header.block_size, cache.block_size);
  }
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    uint64_t sent = 0;
    std::memcpy(&sent, bytes.data() + sizeof(Header) + l * sizeof(uint64_t), sizeof(uint64_t));
    const auto expected = static_cast<uint64_t>(kv_block_bytes(cache, static_cast<int>(l)));
    if (sent != expected) {
      fail("KV block import: layer {} sends {} bytes per block, this cache holds {} (another model or dtype?)", l,
           sent, expected);
    }
  }
}

void check_kv_export_fits(const KvCache& cache, std::span<const uint8_t> bytes) {
  check_kv_header_fits(cache, bytes);
  const size_t expected_size = header_bytes(cache.layers.size()) + kv_payload_bytes(cache, read_header(bytes).num_blocks);
  if (bytes.size() != expected_size) fail("KV block import: {} bytes, expected {}", bytes.size(), expected_size);
}

void copy_kv_blocks_out(const KvCache& cache, std::span<const int32_t> blocks, void* payload,
                        const KvSegmentRead& read) {
  check_blocks(cache, blocks, "export");
  auto* base = static_cast<uint8_t*>(payload);
  for_each_run(cache, blocks, blocks.size(), 0,
               [&](const void* memory, size_t offset, size_t bytes) { read(memory, base + offset, bytes); });
}

void copy_kv_blocks_in(KvCache& cache, std::span<const int32_t> blocks, const KvPayloadView& payload,
                       const KvSegmentWrite& write) {
  check_blocks(cache, blocks, "import");
  if (payload.first_block < 0 || payload.first_block + blocks.size() > static_cast<size_t>(payload.num_blocks)) {
    fail("KV block import: blocks [{}, +{}) of a payload of {}", payload.first_block, blocks.size(), payload.num_blocks);
  }
  const auto* base = static_cast<const uint8_t*>(payload.data);
  for_each_run(cache, blocks, static_cast<size_t>(payload.num_blocks), static_cast<size_t>(payload.first_block),
               [&](void* memory, size_t offset, size_t bytes) { write(memory, base + offset, bytes); });
}

void check_kv_cache_copy(const KvCache& from, std::span<const int32_t> from_blocks, const KvCache& to,
                         std::span<const int32_t> to_blocks) {
  if (from_blocks.size() != to_blocks.size()) {
    fail("KV block copy: {} blocks into {}", from_blocks.size(), to_blocks.size());
  }
  if (from.layers.size() != to.layers.size() || from.block_size != to.block_size) {
    fail("KV block copy: a cache of {} layers and {}-token blocks into one of {} and {}", from.layers.size(),
         from.block_size, to.layers.size(), to.block_size);
  }
  check_blocks(from, from_blocks, "copy");
  check_blocks(to, to_blocks, "copy");
  for (size_t layer = 0; layer < from.layers.size(); ++layer) {
    for (const auto& [from_tensors, to_tensors] : {std::pair{&from.keys, &to.keys}, std::pair{&from.values, &to.values},
                                                   std::pair{&from.states, &to.states}}) {
      if (row_bytes(*from_tensors, layer) != row_bytes(*to_tensors, layer)) {
        fail("KV block copy: layer {} stores {} bytes per token in one cache and {} in the other", layer,
             row_bytes(*from_tensors, layer), row_bytes(*to_tensors, layer));
      }
    }
  }
}

void copy_kv_cache_blocks(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to,
                          std::span<const int32_t> to_blocks, const KvSegmentCopy& copy,
                          const std::function<void(int layer)>& layer_done) {
  check_kv_cache_copy(from, from_blocks, to, to_blocks);
  for (size_t layer = 0; layer < from.layers.size(); ++layer) {
    for (const auto& [from_tensors, to_tensors] : {std::pair{&from.keys, &to.keys}, std::pair{&from.values, &to.values},
                                                   std::pair{&from.states, &to.states}}) {
      const size_t block_bytes = row_bytes(*from_tensors, layer) * static_cast<size_t>(from.block_size);
      if (block_bytes == 0) continue;
      const auto* source = static_cast<const char*>((*from_tensors)[layer].data);
      auto* target = static_cast<char*>((*to_tensors)[layer].data);
      for (size_t i = 0; i < from_blocks.size();) {
        size_t end = i + 1;
        while (end < from_blocks.size() && from_blocks[end] == from_blocks[end - 1] + 1 &&
               to_blocks[end] == to_blocks[end - 1] + 1) {
          ++end;
        }
        copy(target + block_bytes * static_cast<size_t>(to_blocks[i]),
             source + block_bytes * static_cast<size_t>(from_blocks[i]), block_bytes * (end - i));
        i = end;
      }
    }
    if (layer_done) layer_done(static_cast<int>(layer));
  }
}

int32_t kv_blocks_in_export(std::span<const uint8_t> bytes) { return static_cast<int32_t>(read_header(bytes).num_blocks); }

}  // namespace tern
