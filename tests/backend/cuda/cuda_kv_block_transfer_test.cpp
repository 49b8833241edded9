// Backend::export_kv_blocks / import_kv_blocks on the CUDA backend: bytes imported into some blocks come back
// unchanged when those blocks are exported, other blocks are untouched, and a CPU (float32) export is refused by
// the bf16 device cache. Skips without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/kv_block_transfer.h"
#include "core/error.h"

namespace tern {
namespace {

std::vector<KvLayerSpec> layers() {
  KvLayerSpec full{.num_kv_heads = 2, .key_dim = 8, .value_dim = 8};
  KvLayerSpec keys_only{.num_kv_heads = 1, .key_dim = 16, .value_dim = 0};
  return {full, keys_only};
}

TEST(CudaKvBlockTransfer, ImportedBlocksExportUnchangedAndOthersStayAsTheyWere) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_backend(0);
  KvCache cache = gpu->allocate_kv_cache(layers(), 6, 4);
  const std::vector<int32_t> targets{4, 2};
  auto crafted = gpu->export_kv_blocks(cache, targets);  // zeros, with the header this cache expects
  const size_t payload = 2 * static_cast<size_t>(kv_block_bytes(cache, 0) + kv_block_bytes(cache, 1));
  ASSERT_GT(crafted.size(), payload);
  std::mt19937 rng(7);
  for (size_t i = crafted.size() - payload; i < crafted.size(); ++i) crafted[i] = static_cast<uint8_t>(rng());
  gpu->import_kv_blocks(cache, targets, crafted);
  EXPECT_EQ(gpu->export_kv_blocks(cache, targets), crafted);

  const std::vector<int32_t> others{0, 1, 3, 5};
  const auto untouched = gpu->export_kv_blocks(cache, others);
  const size_t other_payload = 4 * static_cast<size_t>(kv_block_bytes(cache, 0) + kv_block_bytes(cache, 1));
  for (size_t i = untouched.size() - other_payload; i < untouched.size(); ++i) ASSERT_EQ(untouched[i], 0) << i;

  auto cpu = make_cpu_backend(1);
  const KvCache host_cache = cpu->allocate_kv_cache(layers(), 6, 4);
  EXPECT_THROW(gpu->import_kv_blocks(cache, targets, cpu->export_kv_blocks(host_cache, targets)), Error);
}

}  // namespace
}  // namespace tern
