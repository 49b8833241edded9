#include "engine/engine.h"

#include <exception>
#include <future>

#include "core/error.h"

namespace tern {

std::optional<RequestOutput> RequestStream::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !outputs_.empty() || finished_; });
  if (outputs_.empty()) return std::nullopt;
  RequestOutput output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

std::optional<RequestOutput> RequestStream::try_next() {
  std::lock_guard lock(mutex_);
  if (outputs_.empty()) return std::nullopt;
  RequestOutput output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

void RequestStream::cancel() { engine_.cancel(request_id_); }

void RequestStream::push(RequestOutput output) {
  {
    std::lock_guard lock(mutex_);
    finished_ = finished_ || output.request_finished;
    outputs_.push_back(std::move(output));
  }
  ready_.notify_all();
}

Engine::Engine(Model& model, Backend& backend, EngineConfig config, TextStreamFactory text_streams)
    : core_(model, backend, std::move(config), std::move(text_streams)), stats_(core_.stats()),
      thread_([this] { loop(); }) {}

Engine::Engine(ShardedModel& model, EngineConfig config, TextStreamFactory text_streams)
    : core_(model, std::move(config), std::move(text_streams)), stats_(core_.stats()), thread_([this] { loop(); }) {}

Engine::~Engine() {
  {
    std::lock_guard lock(inbox_mutex_);
    stopping_ = true;
  }
  inbox_ready_.notify_all();
  thread_.join();
}

uint64_t Engine::enqueue(GenerateRequest request, OutputCallback sink) {
  core_.validate(request);
  const uint64_t id = next_request_id_++;
  {
    std::lock_guard lock(inbox_mutex_);
    submissions_.push_back({id, std::move(request), std::move(sink)});
  }
  inbox_ready_.notify_all();
  return id;
}

std::shared_ptr<RequestStream> Engine::submit(GenerateRequest request) {
  // The stream exists before its id does; delivery (push) never reads the id.
  auto stream = std::shared_ptr<RequestStream>(new RequestStream(0, *this));
  stream->request_id_ = enqueue(std::move(request), [stream](RequestOutput output) { stream->push(std::move(output)); });
  return stream;
}

uint64_t Engine::submit(GenerateRequest request, OutputCallback callback) {
  return enqueue(std::move(request), std::move(callback));
}

void Engine::cancel(uint64_t request_id) {
  {
    std::lock_guard lock(inbox_mutex_);
    cancellations_.push_back(request_id);
  }
  inbox_ready_.notify_all();
}

void Engine::run_between_steps(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  auto done = packaged.get_future();
  {
    std::lock_guard lock(inbox_mutex_);
    if (stopping_) fail("engine: shutting down");
    tasks_.emplace_back([&packaged] { packaged(); });
  }
  inbox_ready_.notify_all();
  done.get();
}

std::vector<uint8_t> Engine::export_prompt_kv(std::vector<int32_t> prompt, int32_t first_block, int32_t max_blocks) {
  std::vector<uint8_t> bytes;
  run_between_steps([&] { bytes = core_.export_prompt_kv(prompt, first_block, max_blocks); });
  return bytes;
}

int32_t Engine::import_prompt_kv(std::vector<int32_t> prompt, int32_t first_block, std::vector<uint8_t> bytes) {
  int32_t imported = 0;
  run_between_steps([&] { imported = core_.import_prompt_kv(prompt, first_block, bytes); });
  return imported;
}

std::vector<uint8_t> Engine::export_prompt_kv_to(std::span<const int32_t> prompt, int32_t first_block,
                                                 int32_t max_blocks, void* payload) {
  std::vector<uint8_t> header;
  run_between_steps([&] { header = core_.export_prompt_kv_to(prompt, first_block, max_blocks, payload); });
  return header;
}

int32_t Engine::import_prompt_kv_from(std::span<const int32_t> prompt, int32_t first_block,
                                      std::span<const uint8_t> header, const void* payload) {
  int32_t imported = 0;
  run_between_steps([&] { imported = core_.import_prompt_kv_from(prompt, first_block, header, payload); });
  return imported;
}

std::unique_ptr<SharedBuffer> Engine::create_shared_buffer(size_t bytes) {
  std::unique_ptr<SharedBuffer> buffer;
  run_between_steps([&] { buffer = core_.create_shared_buffer(bytes); });
  return buffer;
}

std::unique_ptr<SharedBuffer> Engine::open_shared_buffer(std::span<const uint8_t> handle) {
  std::unique_ptr<SharedBuffer> buffer;
  run_between_steps([&] { buffer = core_.open_shared_buffer(handle); });
  return buffer;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void Engine::deliver(std::vector<RequestOutput> outputs) {
  {
    // Refreshed first, so that a client who has seen its request finish reads gauges that no longer count it.
    std::lock_guard lock(stats_mutex_);
    stats_ = core_.stats();
  }
  for (auto& output : outputs) {
    const auto it = sinks_.find(output.request_id);
    if (it == sinks_.end()) continue;
    const bool last = output.request_finished;
    it->second(std::move(output));
    if (last) sinks_.erase(it);
  }
}

void Engine::loop() {
  while (true) {
    std::vector<Submission> submissions;
    std::vector<uint64_t> cancellations;
    std::vector<std::function<void()>> tasks;
    bool stopping = false;
    {
      std::unique_lock lock(inbox_mutex_);
      const bool busy = core_.has_unfinished_requests();
      inbox_ready_.wait(lock, [&] {
        return busy || stopping_ || !submissions_.empty() || !cancellations_.empty() || !tasks_.empty();
      });
      submissions.swap(submissions_);
      cancellations.swap(cancellations_);
      tasks.swap(tasks_);
      stopping = stopping_;
    }
    for (auto& submission : submissions) {
      sinks_.emplace(submission.id, std::move(submission.sink));
      try {
        core_.add_request(submission.id, std::move(submission.request));
      } catch (const std::exception& e) {
        RequestOutput output;
        output.request_id = submission.id;
        output.finish_reason = FinishReason::kAbort;
        output.request_finished = true;
        output.error = e.what();
        deliver({std::move(output)});
      }
    }
    for (uint64_t id : cancellations) deliver(core_.abort(id));
    // A packaged task keeps its exception for the waiting caller.
    for (auto& task : tasks) task();
    if (stopping) {
      for (uint64_t id : core_.unfinished_request_ids()) deliver(core_.abort(id, "the engine is shutting down"));
      break;
    }
    if (core_.has_unfinished_requests()) {
      try {
        deliver(core_.step());
      } catch (const std::exception& e) {
        // The step's state is unknown: abort everything in flight rather than stream wrong tokens.
        for (uint64_t id : core_.unfinished_request_ids()) deliver(core_.abort(id, e.what()));
      }
    }
    std::lock_guard lock(stats_mutex_);
    stats_ = core_.stats();
  }
}

}  // namespace tern
