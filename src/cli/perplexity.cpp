#include "cli/perplexity.h"

#include <algorithm>
#include <cmath>

namespace tern::cli {

int64_t max_scored_tokens_per_window(int64_t num_prefix_tokens, int64_t context_len) {
  return context_len - std::max<int64_t>(num_prefix_tokens, 1);
}

std::vector<PerplexityWindow> plan_perplexity_windows(int64_t num_text_tokens, int64_t num_prefix_tokens,
                                                      int64_t context_len, int64_t stride) {
  const int64_t text_per_window = context_len - num_prefix_tokens;
  // Without a prefix a window's first token has no logits predicting it.
  const int64_t first_scorable = num_prefix_tokens > 0 ? 0 : 1;
  std::vector<PerplexityWindow> windows;
  int64_t scored_end = 0;
  for (int64_t begin = 0;; begin += stride) {
    PerplexityWindow window;
    window.text_begin = begin;
    window.text_end = std::min(begin + text_per_window, num_text_tokens);
    window.scored_begin = std::max(scored_end, begin + first_scorable);
    windows.push_back(window);
    scored_end = window.text_end;
    if (window.text_end == num_text_tokens) return windows;
  }
}

void NllAccumulator::add(double nll) {
  ++count_;
  sum_ += nll;
  sum_squares_ += nll * nll;
}

double NllAccumulator::mean() const { return count_ > 0 ? sum_ / static_cast<double>(count_) : 0.0; }

double NllAccumulator::perplexity() const { return std::exp(mean()); }

double NllAccumulator::std_error() const {
  if (count_ < 2) return 0.0;
  const double mean_nll = mean();
  const double variance = sum_squares_ / static_cast<double>(count_) - mean_nll * mean_nll;
  if (variance <= 0.0) return 0.0;
  return perplexity() * std::sqrt(variance / static_cast<double>(count_ - 1));
}

}  // namespace tern::cli
