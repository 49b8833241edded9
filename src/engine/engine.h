#pragma once
// The in-process API that the HTTP server and tests use. The step loop runs on a thread of its own; submit and
// cancel from any thread. Each request's outputs arrive through a RequestStream (a blocking queue) or a callback
// invoked on the engine thread. Errors never cross threads: a failed step aborts the affected requests with the
// error message in their final output.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_core.h"

namespace tern {

class Engine;

// One request's outputs, in order; the last has request_finished set.
class RequestStream {
 public:
  uint64_t request_id() const { return request_id_; }
  // Waits for the next output; nullopt once the final output has been taken.
  std::optional<RequestOutput> next();
  // The next output if one is ready.
  std::optional<RequestOutput> try_next();
  // Asks the engine to abort the request (e.g. the client went away); its blocks are freed at the next step.
  void cancel();

 private:
  friend class Engine;
  RequestStream(uint64_t request_id, Engine& engine) : request_id_(request_id), engine_(engine) {}
  void push(RequestOutput output);

  uint64_t request_id_;
  Engine& engine_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> outputs_;
  bool finished_ = false;  // the final output has been pushed
};

using OutputCallback = std::function<void(RequestOutput)>;

class Engine {
 public:
  Engine(Model& model, Backend& backend, EngineConfig config, TextStreamFactory text_streams = {});
  Engine(ShardedModel& model, EngineConfig config, TextStreamFactory text_streams = {});
  // Aborts whatever is unfinished and joins the loop.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (throws tern::Error on bad input) and queues it. The stream must not outlive the engine.
  std::shared_ptr<RequestStream> submit(GenerateRequest request);
  // The same, delivering outputs to `callback` on the engine thread; returns the request id.
  uint64_t submit(GenerateRequest request, OutputCallback callback);
  void cancel(uint64_t request_id);

  // EngineCore::export_prompt_kv / import_prompt_kv, run on the engine thread between two steps (never racing
  // one); block the caller until done and rethrow what the call threw. Not from an output callback (the engine
  // thread would wait on itself).
  std::vector<uint8_t> export_prompt_kv(std::vector<int32_t> prompt, int32_t first_block, int32_t max_blocks);
  int32_t import_prompt_kv(std::vector<int32_t> prompt, int32_t first_block, std::vector<uint8_t> bytes);
  // The same with the payload apart from the header (EngineCore::export_prompt_kv_to / import_prompt_kv_from).
  std::vector<uint8_t> export_prompt_kv_to(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks,
                                           void* payload);
  int32_t import_prompt_kv_from(std::span<const int32_t> prompt, int32_t first_block, std::span<const uint8_t> header,
                                const void* payload);
  size_t kv_payload_bytes(int32_t num_blocks) const { return core_.kv_payload_bytes(num_blocks); }
  // EngineCore::create_shared_buffer / open_shared_buffer, on the engine thread (where its device is current).
  std::unique_ptr<SharedBuffer> create_shared_buffer(size_t bytes);
  std::unique_ptr<SharedBuffer> open_shared_buffer(std::span<const uint8_t> handle);

  EngineStats stats() const;
  const KvCacheBudget& kv_budget() const { return core_.kv_budget(); }
  int64_t max_model_len() const { return core_.max_model_len(); }

 private:
  struct Submission {
    uint64_t id;
    GenerateRequest request;
    OutputCallback sink;
  };
  uint64_t enqueue(GenerateRequest request, OutputCallback sink);
  void loop();
  // Queues `task` for the engine thread's next pass between steps and waits for it.
  void run_between_steps(std::function<void()> task);
  void deliver(std::vector<RequestOutput> outputs);

  EngineCore core_;
  std::atomic<uint64_t> next_request_id_{1};

  std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::vector<Submission> submissions_;
  std::vector<uint64_t> cancellations_;
  std::vector<std::function<void()>> tasks_;
  bool stopping_ = false;

  std::unordered_map<uint64_t, OutputCallback> sinks_;  // engine thread only

  mutable std::mutex stats_mutex_;
  EngineStats stats_;

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace tern
