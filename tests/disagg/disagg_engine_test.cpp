// Prefill/decode disaggregation below the HTTP layer: a prompt's KV exported from one engine and imported into
// another (directly and over the TCP transport) makes the second engine reuse it, and its greedy output still
// equals the transformers goldens.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>

#include "backend/kv_block_transfer.h"
#include "core/error.h"
#include "disagg/kv_transport.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "fixture_model.h"
#include "fixtures.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::load_fixture_model;

EngineConfig config(int32_t block_size = 4) {
  EngineConfig c;
  c.num_kv_blocks = 64;
  c.block_size = block_size;
  c.max_num_batched_tokens = 256;
  c.log_kv_cache = false;
  return c;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

std::vector<int32_t> run(EngineCore& core, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  static uint64_t next_id = 1;
  core.add_request(next_id++, greedy(prompt, max_tokens));
  std::vector<int32_t> tokens;
  while (core.has_unfinished_requests()) {
    for (const auto& out : core.step()) tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
  }
  return tokens;
}

std::vector<int32_t> run(Engine& engine, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  auto stream = engine.submit(greedy(prompt, max_tokens));
  std::vector<int32_t> tokens;
  while (auto out = stream->next()) tokens.insert(tokens.end(), out->token_ids.begin(), out->token_ids.end());
  return tokens;
}

struct Golden {
  std::vector<int32_t> prompt;  // 40 tokens: 9 reusable blocks of 4 (the last token is always computed)
  std::vector<int32_t> greedy_24;
};

Golden golden_of(const std::string& arch) {
  const auto golden = testing::read_json(fixtures_dir() / "models" / arch / "golden.json");
  return {golden["prompts"][2].get<std::vector<int32_t>>(), golden["greedy_24"][2].get<std::vector<int32_t>>()};
}

TEST(DisaggEngine, ImportedChunksAreReusedAndTheOutputEqualsTheGoldens) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  EngineCore prefill(*m.model, *m.backend, config());
  EngineCore decode(*m.model, *m.backend, config());
  run(prefill, golden.prompt, 1);
  int32_t imported = 0;
  for (int32_t first = 0;;) {
    const auto chunk = prefill.export_prompt_kv(golden.prompt, first, 4);
    const int32_t n = kv_blocks_in_export(chunk);
    if (n == 0) break;
    imported += decode.import_prompt_kv(golden.prompt, first, chunk);
    first += n;
  }
  EXPECT_EQ(imported, 9);
  EXPECT_EQ(run(decode, golden.prompt, 24), golden.greedy_24);
  EXPECT_EQ(decode.stats().prefix_hit_tokens, 36);
}

TEST(DisaggEngine, AChunkWhoseEarlierBlocksNeverArrivedIsIgnored) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  EngineCore prefill(*m.model, *m.backend, config());
  EngineCore decode(*m.model, *m.backend, config());
  run(prefill, golden.prompt, 1);
  EXPECT_EQ(decode.import_prompt_kv(golden.prompt, 4, prefill.export_prompt_kv(golden.prompt, 4, 4)), 0);
  EXPECT_EQ(run(decode, golden.prompt, 24), golden.greedy_24);
  EXPECT_EQ(decode.stats().prefix_hit_tokens, 0);
}

TEST(DisaggEngine, KvOfAnotherCacheShapeIsRefusedAndLeavesNothingCached) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  EngineCore prefill(*m.model, *m.backend, config(4));
  EngineCore decode(*m.model, *m.backend, config(8));
  run(prefill, golden.prompt, 1);
  EXPECT_THROW(decode.import_prompt_kv(golden.prompt, 0, prefill.export_prompt_kv(golden.prompt, 0, 2)), Error);
  EXPECT_EQ(run(decode, golden.prompt, 24), golden.greedy_24);
  EXPECT_EQ(decode.stats().prefix_hit_tokens, 0);
  // More blocks than a request for the prompt could reuse is an error too.
  EngineCore other(*m.model, *m.backend, config(4));
  const std::vector<int32_t> short_prompt(golden.prompt.begin(), golden.prompt.begin() + 8);
  EXPECT_THROW(other.import_prompt_kv(short_prompt, 0, prefill.export_prompt_kv(golden.prompt, 0, 2)), Error);
}

TEST(DisaggEngine, TcpTransferBetweenThreadedEnginesIsReusedByTheDecodeEngine) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  Engine prefill(*m.model, *m.backend, config());
  Engine decode(*m.model, *m.backend, config());
  auto transport = disagg::make_kv_transport("tcp");
  auto receiver = transport->listen("127.0.0.1", 0, decode);
  ASSERT_GT(receiver->port(), 0);

  EXPECT_EQ(run(prefill, golden.prompt, 1), std::vector<int32_t>{golden.greedy_24[0]});
  auto sender = transport->connect("127.0.0.1:" + std::to_string(receiver->port()));
  for (int32_t first = 0;;) {
    const auto chunk = prefill.export_prompt_kv(golden.prompt, first, 2);
    const int32_t n = kv_blocks_in_export(chunk);
    if (n == 0) break;
    sender->send(golden.prompt, first, chunk);
    first += n;
  }
  EXPECT_EQ(sender->finish(), 9);
  EXPECT_EQ(receiver->num_imported_blocks(), 9);
  EXPECT_EQ(run(decode, golden.prompt, 24), golden.greedy_24);
  EXPECT_EQ(decode.stats().prefix_hit_tokens, 36);
}

TEST(DisaggEngine, TcpTransferErrorsReachTheSender) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  Engine prefill(*m.model, *m.backend, config(4));
  Engine decode(*m.model, *m.backend, config(8));
  auto transport = disagg::make_kv_transport("tcp");
  auto receiver = transport->listen("127.0.0.1", 0, decode);
  run(prefill, golden.prompt, 1);
  auto sender = transport->connect("127.0.0.1:" + std::to_string(receiver->port()));
  sender->send(golden.prompt, 0, prefill.export_prompt_kv(golden.prompt, 0, 2));
  try {
    sender->finish();
    ADD_FAILURE() << "a chunk of another block size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens each"), std::string::npos) << e.what();
  }
  const uint16_t closed_port = receiver->port();
  receiver.reset();
  EXPECT_THROW(transport->connect("127.0.0.1:" + std::to_string(closed_port)), Error);
  EXPECT_THROW(transport->connect("no-port"), Error);
  EXPECT_THROW(disagg::make_kv_transport("carrier-pigeon"), Error);
}

// A decode endpoint that accepts the connection and reads, but never answers: the sender gives up after its timeout
// instead of holding the prefill request forever.
TEST(DisaggEngine, TcpSenderGivesUpOnASilentDecodeInstance) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = acceptor.local_endpoint().port();
  auto transport = disagg::make_kv_transport("tcp", std::chrono::milliseconds(300));
  auto sender = transport->connect("127.0.0.1:" + std::to_string(port));  // the kernel completes the handshake
  asio::ip::tcp::socket accepted = acceptor.accept();
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<uint8_t> chunk(64, 0);
  sender->send(prompt, 0, chunk);
  const auto start = std::chrono::steady_clock::now();
  try {
    sender->finish();
    ADD_FAILURE() << "finish() returned without an answer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 300 ms"), std::string::npos) << e.what();
  }
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited_s, 0.25);
  EXPECT_LT(waited_s, 5.0);
  EXPECT_THROW(disagg::make_kv_transport("tcp", std::chrono::milliseconds(0)), Error);
}

}  // namespace
}  // namespace tern
