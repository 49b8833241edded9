// Backend::export_kv_blocks / import_kv_blocks(_from) on the CPU backend: a round trip moves exactly the chosen
// blocks' keys, values and states of every layer, part of a payload imports into any blocks, and an export that
// does not fit the importing cache is refused.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/kv_block_transfer.h"
#include "core/error.h"

namespace tern {
namespace {

std::vector<KvLayerSpec> two_layers(int64_t key_dim = 8) {
  KvLayerSpec full{.num_kv_heads = 2, .key_dim = key_dim, .value_dim = 8};
  KvLayerSpec stateful{.num_kv_heads = 1, .key_dim = 4, .value_dim = 0, .state_dim = 3};
  return {full, stateful};
}

// Every float of the cache a distinct value, so any misplaced row shows.
void fill(KvCache& cache, float base) {
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    for (Tensor* t : {&cache.keys[l], &cache.values[l], &cache.states[l]}) {
      for (int64_t i = 0; i < t->numel(); ++i) t->ptr<float>()[i] = base + static_cast<float>(l * 100000 + i);
    }
  }
}

// The rows of block `block` of one tensor.
std::vector<float> block_rows(const Tensor& t, int64_t block, int64_t block_size) {
  const int64_t row = t.row_numel();
  const float* begin = t.ptr<float>() + block * block_size * row;
  return {begin, begin + block_size * row};
}

TEST(KvBlockTransfer, RoundTripCopiesTheChosenBlocksOfEveryLayer) {
  auto backend = make_cpu_backend(1);
  KvCache source = backend->allocate_kv_cache(two_layers(), 6, 4);
  KvCache target = backend->allocate_kv_cache(two_layers(), 6, 4);
  fill(source, 0.0f);
  fill(target, -1e6f);
  const std::vector<int32_t> from{4, 1};
  const std::vector<int32_t> to{0, 5};
  const auto bytes = backend->export_kv_blocks(source, from);
  EXPECT_EQ(kv_blocks_in_export(bytes), 2);
  backend->import_kv_blocks(target, to, bytes);
  for (size_t l = 0; l < 2; ++l) {
    for (size_t i = 0; i < from.size(); ++i) {
      EXPECT_EQ(block_rows(target.keys[l], to[i], 4), block_rows(source.keys[l], from[i], 4)) << "layer " << l;
      EXPECT_EQ(block_rows(target.values[l], to[i], 4), block_rows(source.values[l], from[i], 4)) << "layer " << l;
      EXPECT_EQ(block_rows(target.states[l], to[i], 4), block_rows(source.states[l], from[i], 4)) << "layer " << l;
    }
    // Blocks not imported keep what they held.
    EXPECT_EQ(block_rows(target.keys[l], 2, 4)[0], -1e6f + static_cast<float>(l * 100000 + 2 * 4 * target.keys[l].row_numel()));
  }
}

// Consecutive cache blocks move as one run, others one by one: a payload of blocks {0, 1, 2, 4} (runs 0-2 and 4),
// of which blocks 1..3 of the payload are imported into {5, 2, 3} (runs 5 and 2-3), lands each block's rows where
// they belong.
TEST(KvBlockTransfer, PartOfAPayloadImportsIntoAnyBlocks) {
  auto backend = make_cpu_backend(1);
  KvCache source = backend->allocate_kv_cache(two_layers(), 6, 4);
  KvCache target = backend->allocate_kv_cache(two_layers(), 6, 4);
  fill(source, 0.0f);
  fill(target, -1e6f);
  const std::vector<int32_t> exported{0, 1, 2, 4};
  const auto bytes = backend->export_kv_blocks(source, exported);
  const std::vector<int32_t> into{5, 2, 3};
  backend->import_kv_blocks_from(target, into, {bytes.data() + kv_header_bytes(bytes), 4, 1});
  for (size_t l = 0; l < 2; ++l) {
    for (auto member : {&KvCache::keys, &KvCache::values, &KvCache::states}) {
      const Tensor& from = (source.*member)[l];
      const Tensor& to = (target.*member)[l];
      if (from.row_numel() == 0) continue;
      for (size_t i = 0; i < into.size(); ++i) {
        EXPECT_EQ(block_rows(to, into[i], 4), block_rows(from, exported[i + 1], 4)) << "layer " << l << " block " << i;
      }
      EXPECT_EQ(block_rows(to, 0, 4)[0], -1e6f + static_cast<float>(l * 100000));  // not imported into
    }
  }
  EXPECT_THROW(backend->import_kv_blocks_from(target, into, {bytes.data() + kv_header_bytes(bytes), 4, 2}), Error);
}

TEST(KvBlockTransfer, AnExportThatDoesNotFitTheCacheIsRefusedNamingWhy) {
  auto backend = make_cpu_backend(1);
  KvCache source = backend->allocate_kv_cache(two_layers(), 4, 4);
  const std::vector<int32_t> one{0};
  const auto bytes = backend->export_kv_blocks(source, one);
  const auto expect_error = [&](KvCache& target, std::span<const uint8_t> data, const std::string& needle) {
    try {
      backend->import_kv_blocks(target, one, data);
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  KvCache other_dim = backend->allocate_kv_cache(two_layers(16), 4, 4);
  expect_error(other_dim, bytes, "bytes per block");
  KvCache other_block_size = backend->allocate_kv_cache(two_layers(), 4, 8);
  expect_error(other_block_size, bytes, "tokens each");
  KvCache one_layer = backend->allocate_kv_cache({two_layers()[0]}, 4, 4);
  expect_error(one_layer, bytes, "layers");
  KvCache same = backend->allocate_kv_cache(two_layers(), 4, 4);
  expect_error(same, std::span(bytes).first(bytes.size() - 1), "expected");
  expect_error(same, std::span(bytes).first(5), "too few");
  std::vector<uint8_t> garbage(bytes.size(), 0x5a);
  expect_error(same, garbage, "header");
  const std::vector<int32_t> outside{4};
  EXPECT_THROW(backend->import_kv_blocks(same, outside, bytes), Error);
  EXPECT_THROW(backend->export_kv_blocks(same, outside), Error);
}

}  // namespace
}  // namespace tern
