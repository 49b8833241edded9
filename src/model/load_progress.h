#pragma once
// How far loading a checkpoint onto the backends has come, in bytes of checkpoint tensors, for a progress display:
// every rank's loader adds what it copied, and the listener hears of it at most every `interval` (and at the end).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

namespace tern {

class LoadProgress {
 public:
  // loaded and total bytes, the seconds since the start, and whether loading has finished.
  using Listener = std::function<void(int64_t loaded_bytes, int64_t total_bytes, double elapsed_s, bool done)>;

  explicit LoadProgress(Listener listener, std::chrono::milliseconds interval = std::chrono::milliseconds(200));

  // The checkpoint's size (every rank opens the same one; the ranks' loads, shards of it, add up to about it).
  void set_total(int64_t bytes) { total_bytes_ = bytes; }
  // Thread-safe.
  void add_loaded(int64_t bytes);
  void finish();

 private:
  void report(bool done);

  Listener listener_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<int64_t> total_bytes_{0};
  std::atomic<int64_t> loaded_bytes_{0};
  std::mutex report_mutex_;
  std::chrono::steady_clock::time_point last_report_;
};

}  // namespace tern
