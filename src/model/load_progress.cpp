#include "model/load_progress.h"

namespace tern {

LoadProgress::LoadProgress(Listener listener, std::chrono::milliseconds interval)
    : listener_(std::move(listener)),
      interval_(interval),
      start_(std::chrono::steady_clock::now()),
      last_report_(start_) {}

void LoadProgress::add_loaded(int64_t bytes) {
  loaded_bytes_ += bytes;
  if (std::chrono::steady_clock::now() - last_report_ >= interval_) report(false);
}

void LoadProgress::finish() { report(true); }

void LoadProgress::report(bool done) {
  // One report at a time; a rank that finds the lock taken leaves the report to the holder.
  std::unique_lock lock(report_mutex_, std::try_to_lock);
  if (!lock.owns_lock() && !done) return;
  if (!lock.owns_lock()) lock.lock();
  const auto now = std::chrono::steady_clock::now();
  if (!done && now - last_report_ < interval_) return;
  last_report_ = now;
  if (listener_) {
    listener_(loaded_bytes_.load(), total_bytes_.load(), std::chrono::duration<double>(now - start_).count(), done);
  }
}

}  // namespace tern
