#pragma once
// The arithmetic of `tern perplexity`: Hugging Face's sliding-window perplexity of fixed-length models ("perplexity
// of fixed-length models"), with llama.cpp's BOS handling and its standard error of the estimate.
#include <cstdint>
#include <vector>

namespace tern::cli {

// One window: the model reads the tokenizer's prefix (its BOS, read again at the start of every window, as
// llama.cpp does) and then text tokens [text_begin, text_end); it scores [scored_begin, text_end), the tokens no
// earlier window scored.
struct PerplexityWindow {
  int64_t text_begin = 0;
  int64_t scored_begin = 0;
  int64_t text_end = 0;
};

// The most new tokens a window of `context_len` positions can score: all but its first position, which only gives
// context (the prefix's BOS, or without a prefix the first text token, which nothing before it predicts).
int64_t max_scored_tokens_per_window(int64_t num_prefix_tokens, int64_t context_len);

// The windows over `num_text_tokens` text tokens: window k starts at text token k * stride and runs
// context_len - num_prefix_tokens text tokens (fewer at the end of the text); the last one reaches the end.
// Every text token is scored exactly once, except the first one when there is no prefix. Needs
// 1 <= stride <= max_scored_tokens_per_window(num_prefix_tokens, context_len).
std::vector<PerplexityWindow> plan_perplexity_windows(int64_t num_text_tokens, int64_t num_prefix_tokens,
                                                      int64_t context_len, int64_t stride);

// The negative log-likelihoods of the scored tokens, summed as llama.cpp's perplexity does.
class NllAccumulator {
 public:
  void add(double nll);
  int64_t count() const { return count_; }
  double mean() const;
  double perplexity() const;
  // The standard error of the perplexity: perplexity * sqrt(var(nll) / (count - 1)) (the delta method, llama.cpp's
  // formula); 0 while fewer than two tokens give no variance to estimate it from.
  double std_error() const;

 private:
  int64_t count_ = 0;
  double sum_ = 0;
  double sum_squares_ = 0;
};

}  // namespace tern::cli
