// Prefill/decode disaggregation below the HTTP layer: a prompt's KV exported from one engine and imported into
// another (directly, over the TCP transport and through shared memory) makes the second engine reuse it, and its
// greedy output still equals the transformers goldens; blocks go out while the prompt is still being prefilled.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/kv_block_transfer.h"
#include "backend/shared_buffer.h"
#include "core/error.h"
#include "disagg/ipc_kv_transport.h"
#include "disagg/kv_transport.h"
#include "disagg/prefill_kv_stream.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "fixture_model.h"
#include "fixtures.h"
#include "greedy_request.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::greedy;
using testing::load_fixture_model;

EngineConfig config(int32_t block_size = 4) {
  EngineConfig c;
  c.num_kv_blocks = 64;
  c.block_size = block_size;
  c.max_num_batched_tokens = 256;
  c.log_kv_cache = false;
  return c;
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

class DisaggTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(DisaggTransport, TransferBetweenThreadedEnginesIsReusedByTheDecodeEngine) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  Engine prefill(*m.model, *m.backend, config());
  Engine decode(*m.model, *m.backend, config());
  auto transport = disagg::make_kv_transport(GetParam(), std::chrono::seconds(30), 2);
  EXPECT_EQ(transport->name(), GetParam());
  auto receiver = transport->listen("127.0.0.1", 0, decode);
  ASSERT_GT(receiver->port(), 0);

  EXPECT_EQ(run(prefill, golden.prompt, 1), std::vector<int32_t>{golden.greedy_24[0]});
  // Two transfers in turn (the second finds everything cached), so the shared slots come back after the first.
  for (int64_t expected : {9, 0}) {
    auto sender = transport->connect("127.0.0.1:" + std::to_string(receiver->port()), prefill);
    int32_t first = 0;
    while (const int32_t n = sender->send(golden.prompt, first, 5)) {
      EXPECT_LE(n, 5);
      first += n;
    }
    EXPECT_EQ(first, 9);
    EXPECT_EQ(sender->finish(), expected);
  }
  EXPECT_EQ(receiver->num_imported_blocks(), 9);
  EXPECT_EQ(run(decode, golden.prompt, 24), golden.greedy_24);
  EXPECT_EQ(decode.stats().prefix_hit_tokens, 36);
}

TEST_P(DisaggTransport, ErrorsReachTheSenderAndTheTransportStaysUsable) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  Engine prefill(*m.model, *m.backend, config(4));
  Engine decode(*m.model, *m.backend, config(8));
  Engine same(*m.model, *m.backend, config(4));
  auto transport = disagg::make_kv_transport(GetParam(), std::chrono::seconds(30), 2);
  auto receiver = transport->listen("127.0.0.1", 0, decode);
  run(prefill, golden.prompt, 1);
  {
    auto sender = transport->connect("127.0.0.1:" + std::to_string(receiver->port()), prefill);
    EXPECT_EQ(sender->send(golden.prompt, 0, 2), 2);
    try {
      sender->finish();
      ADD_FAILURE() << "a chunk of another block size was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tokens each"), std::string::npos) << e.what();
    }
  }
  auto good = transport->listen("127.0.0.1", 0, same);
  for (int round = 0; round < 3; ++round) {  // more transfers than shared slots
    auto sender = transport->connect("127.0.0.1:" + std::to_string(good->port()), prefill);
    for (int32_t first = 0; const int32_t n = sender->send(golden.prompt, first, 2);) first += n;
    EXPECT_EQ(sender->finish(), round == 0 ? 9 : 0);
  }
  EXPECT_EQ(run(same, golden.prompt, 24), golden.greedy_24);
  EXPECT_EQ(same.stats().prefix_hit_tokens, 36);

  const uint16_t closed_port = receiver->port();
  receiver.reset();
  EXPECT_THROW(transport->connect("127.0.0.1:" + std::to_string(closed_port), prefill), Error);
  EXPECT_THROW(transport->connect("no-port", prefill), Error);
}

INSTANTIATE_TEST_SUITE_P(Transports, DisaggTransport, ::testing::Values("tcp", "ipc"),
                         [](const auto& info) { return info.param; });

TEST(DisaggEngine, ChunkSizesDefaultPerTransportAndBadOnesAreRefused) {
  EXPECT_EQ(disagg::make_kv_transport("tcp")->blocks_per_chunk(), 8);
  EXPECT_EQ(disagg::make_kv_transport("ipc")->blocks_per_chunk(), 32);
  EXPECT_EQ(disagg::make_kv_transport("ipc", std::chrono::seconds(1), 4)->blocks_per_chunk(), 4);
  EXPECT_THROW(disagg::make_kv_transport("carrier-pigeon"), Error);
  EXPECT_THROW(disagg::make_kv_transport("ipc", std::chrono::seconds(1), 0), Error);
}

// The CPU backend shares POSIX shared memory: what one buffer holds, the opened one reads, and a handle of another
// kind (a GPU's) is refused by name.
TEST(DisaggEngine, SharedBuffersOpenOnlyTheirOwnKind) {
  auto m = load_fixture_model("llama");
  auto created = m.backend->create_shared_buffer(4096);
  ASSERT_EQ(created->size(), 4096u);
  std::memset(created->data(), 0x5a, 4096);
  auto opened = m.backend->open_shared_buffer(created->handle());
  ASSERT_EQ(opened->size(), 4096u);
  EXPECT_EQ(static_cast<const uint8_t*>(opened->data())[4095], 0x5a);
  static_cast<uint8_t*>(opened->data())[0] = 7;
  EXPECT_EQ(static_cast<const uint8_t*>(created->data())[0], 7);
  try {
    m.backend->open_shared_buffer(encode_shared_handle("cuda-ipc", std::vector<uint8_t>(72, 1)));
    ADD_FAILURE() << "a cuda-ipc handle was opened by the CPU backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'cuda-ipc'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.backend->open_shared_buffer(std::vector<uint8_t>{1, 2, 3}), Error);
}

TEST(DisaggEngine, StagingSlotsAreHandedOutOnceAndWaitedFor) {
  auto m = load_fixture_model("llama");
  disagg::StagingSlots slots(m.backend->create_shared_buffer(4 * 1000), 4);
  EXPECT_EQ(slots.slot_bytes(), 1000u);
  std::vector<int> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(slots.try_acquire());
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(taken, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(slots.try_acquire(), -1);
  EXPECT_EQ(slots.acquire(std::chrono::milliseconds(20)), -1);
  std::thread giver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slots.release(2);
  });
  EXPECT_EQ(slots.acquire(std::chrono::seconds(10)), 2);
  giver.join();
}

// A prompt prefilled over fifty steps (four tokens a step): blocks go out while later ones are still being computed
// (how many depends on thread timing: at least one), and the decode engine reuses every block and generates what
// an engine that computed the prompt itself does.
TEST(DisaggEngine, BlocksAreSentWhileThePromptIsStillBeingPrefilled) {
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 5; ++i) prompt.insert(prompt.end(), golden.prompt.begin(), golden.prompt.end());
  EngineConfig chunked = config();
  chunked.max_num_batched_tokens = 4;
  Engine prefill(*m.model, *m.backend, chunked);
  Engine decode(*m.model, *m.backend, config());
  auto transport = disagg::make_kv_transport("tcp");
  auto receiver = transport->listen("127.0.0.1", 0, decode);
  auto sender = transport->connect("127.0.0.1:" + std::to_string(receiver->port()), prefill);

  const std::vector<std::vector<int32_t>> prompts = {prompt};
  const std::vector<std::shared_ptr<RequestStream>> streams = {prefill.submit(greedy(prompt, 1))};
  std::vector<int32_t> tokens;
  const auto transfer = disagg::send_kv_while_prefilling(*sender, prompts, streams, 1, [&](size_t i, RequestOutput out) {
    EXPECT_EQ(i, 0u);
    tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
  });
  ASSERT_FALSE(transfer.error) << *transfer.error;
  EXPECT_EQ(tokens.size(), 1u);
  EXPECT_EQ(transfer.blocks_sent, 49);
  EXPECT_EQ(transfer.blocks_imported, 49);
  EXPECT_GE(transfer.blocks_sent_during_prefill, 1);
  Engine alone(*m.model, *m.backend, config());
  const auto expected = run(alone, prompt, 24);
  EXPECT_EQ(expected.front(), tokens.front());
  EXPECT_EQ(run(decode, prompt, 24), expected);
  EXPECT_EQ(decode.stats().prefix_hit_tokens, 49 * 4);
}

// A decode endpoint that accepts the connection and reads, but never answers: the sender gives up after its timeout
// instead of holding the prefill request forever.
TEST(DisaggEngine, TcpSenderGivesUpOnASilentDecodeInstance) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = acceptor.local_endpoint().port();
  auto transport = disagg::make_kv_transport("tcp", std::chrono::milliseconds(300));
  auto m = load_fixture_model("llama");
  const auto golden = golden_of("llama");
  Engine prefill(*m.model, *m.backend, config());
  run(prefill, golden.prompt, 1);
  auto sender = transport->connect("127.0.0.1:" + std::to_string(port), prefill);  // the kernel completes the handshake
  asio::ip::tcp::socket accepted = acceptor.accept();
  EXPECT_EQ(sender->send(golden.prompt, 0, 2), 2);
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
