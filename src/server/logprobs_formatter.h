#pragma once
// The engine's per-token logprobs in OpenAI's two shapes: the legacy completions object (parallel lists) and the
// chat list of {token, logprob, bytes, top_logprobs}. Tokens are spelled as their decoded text.
#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

class LogprobsFormatter {
 public:
  // `tokens_as_ids` spells tokens "token_id:<id>" (vLLM's return_tokens_as_token_ids) instead of their text.
  LogprobsFormatter(const Tokenizer& tokenizer, bool tokens_as_ids) : tokenizer_(tokenizer), tokens_as_ids_(tokens_as_ids) {}

  // An empty completions logprobs object: {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}.
  static Json empty_completion();
  // Appends `tokens` to a completions logprobs object; `text_offset` is the choice's text length so far and advances.
  void append_completion(Json& logprobs, const std::vector<TokenLogprob>& tokens, int64_t& text_offset) const;
  // Chat "logprobs.content" entries for `tokens`.
  Json chat_content(const std::vector<TokenLogprob>& tokens) const;

 private:
  std::string token_text(int32_t id) const;
  Json token_bytes(int32_t id) const;

  const Tokenizer& tokenizer_;
  bool tokens_as_ids_;
};

}  // namespace tern::server
