#include "cli/bench_run.h"

#include <algorithm>
#include <cmath>

namespace tern::cli {

nlohmann::json latency_summary_ms(std::vector<double> seconds) {
  if (seconds.empty()) return nullptr;
  std::sort(seconds.begin(), seconds.end());
  const auto at = [&](double q) {
    const size_t rank = static_cast<size_t>(std::ceil(q * seconds.size()));
    return seconds[std::min(seconds.size() - 1, rank == 0 ? 0 : rank - 1)] * 1e3;
  };
  double sum = 0;
  for (double v : seconds) sum += v;
  return {{"mean", sum / seconds.size() * 1e3}, {"p50", at(0.5)}, {"p90", at(0.9)}, {"p99", at(0.99)},
          {"max", seconds.back() * 1e3}};
}

}  // namespace tern::cli
