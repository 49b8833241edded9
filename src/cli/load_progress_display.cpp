#include "cli/load_progress_display.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>
#include <string>

namespace tern::cli {

namespace {

std::string size_text(double bytes) {
  return bytes >= 1e9 ? fmt::format("{:.1f} GB", bytes / 1e9) : fmt::format("{:.1f} MB", bytes / 1e6);
}

}  // namespace

LoadProgress::Listener load_progress_display() {
  const bool terminal = isatty(STDERR_FILENO) != 0;
  constexpr double kPlainLineInterval_s = 5.0;
  return [terminal, next_line_s = kPlainLineInterval_s](int64_t loaded_bytes, int64_t total_bytes, double elapsed_s,
                                                        bool done) mutable {
    const double loaded = static_cast<double>(std::min(loaded_bytes, std::max(total_bytes, loaded_bytes)));
    const double rate = elapsed_s > 0 ? loaded / elapsed_s : 0.0;
    if (done) {
      std::fprintf(stderr, "%stern: loaded %s of weights in %.1f s (%.2f GB/s)%s\n", terminal ? "\r" : "",
                   size_text(loaded).c_str(), elapsed_s, rate / 1e9, terminal ? "\x1b[K" : "");
      return;
    }
    if (total_bytes <= 0) return;
    const double fraction = std::min(1.0, loaded / static_cast<double>(total_bytes));
    const double left_s = rate > 0 ? (static_cast<double>(total_bytes) - loaded) / rate : 0.0;
    const std::string status = fmt::format("{:3.0f}% {} of {}, {:.2f} GB/s, {:.0f} s left", fraction * 100,
                                           size_text(loaded), size_text(static_cast<double>(total_bytes)), rate / 1e9,
                                           std::max(0.0, left_s));
    if (terminal) {
      std::fprintf(stderr, "\rtern: loading weights: %s\x1b[K", status.c_str());
    } else if (elapsed_s >= next_line_s) {
      std::fprintf(stderr, "tern: loading weights: %s\n", status.c_str());
      next_line_s = elapsed_s + kPlainLineInterval_s;
    }
    std::fflush(stderr);
  };
}

}  // namespace tern::cli
