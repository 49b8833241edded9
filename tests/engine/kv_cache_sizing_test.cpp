// How the engine sizes its KV pool when no size is given (a share of the backend's memory, capped at what
// max_num_seqs sequences of max_model_len tokens use) and what it does with a context the pool cannot hold.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine_core.h"
#include "fixture_model.h"

namespace tern {
namespace {

EngineConfig fractional_config() {
  EngineConfig config;  // no blocks or bytes given: kv_cache_memory_fraction applies
  config.log_kv_cache = false;
  config.max_num_batched_tokens = 64;
  return config;
}

TEST(KvCacheSizing, AFractionOfHostMemoryHoldsNoMoreThanTheSequencesCanUse) {
  auto fixture = testing::load_fixture_model("llama");
  EngineConfig config = fractional_config();
  config.max_num_seqs = 3;
  config.max_model_len = 100;  // 7 blocks of 16 tokens
  EngineCore core(*fixture.model, *fixture.backend, config);
  EXPECT_EQ(core.kv_budget().num_blocks, 3 * 7);
  EXPECT_EQ(core.max_model_len(), 100);
}

TEST(KvCacheSizing, AContextAskedForThatThePoolCannotHoldIsRefused) {
  auto fixture = testing::load_fixture_model("llama");
  EngineConfig config = fractional_config();
  config.num_kv_blocks = 4;  // 64 tokens
  config.max_model_len = 65;
  try {
    EngineCore core(*fixture.model, *fixture.backend, config);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_model_len 65 is more than the KV cache holds"), std::string::npos)
        << e.what();
  }
  config.max_model_len = 64;
  EngineCore fits(*fixture.model, *fixture.backend, config);
  EXPECT_EQ(fits.max_model_len(), 64);
}

TEST(KvCacheSizing, TheModelsContextIsLoweredToWhatThePoolHolds) {
  auto fixture = testing::load_fixture_model("llama");
  ASSERT_GT(fixture.model->config().max_position_embeddings, 64);
  EngineConfig config = fractional_config();
  config.num_kv_blocks = 4;
  EngineCore core(*fixture.model, *fixture.backend, config);
  EXPECT_EQ(core.max_model_len(), 64);
}

}  // namespace
}  // namespace tern
