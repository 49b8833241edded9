#include "server/logprobs_formatter.h"

#include <fmt/format.h>

#include <cmath>

namespace tern::server {

namespace {

// JSON has no -Infinity: a token masked out (logprob -inf) is reported with the lowest finite float, as vLLM does.
double finite_logprob(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

}  // namespace

std::string LogprobsFormatter::token_text(int32_t id) const {
  if (tokens_as_ids_) return fmt::format("token_id:{}", id);
  const int32_t ids[] = {id};
  return tokenizer_.decode(ids, /*skip_special_tokens=*/false);
}

Json LogprobsFormatter::token_bytes(int32_t id) const {
  Json bytes = Json::array();
  if (id < 0 || id >= tokenizer_.vocab_size()) return bytes;
  for (unsigned char byte : tokenizer_.token_bytes(id)) bytes.push_back(static_cast<int>(byte));
  return bytes;
}

Json LogprobsFormatter::empty_completion() {
  return {{"text_offset", Json::array()}, {"token_logprobs", Json::array()}, {"tokens", Json::array()},
          {"top_logprobs", Json::array()}};
}

void LogprobsFormatter::append_completion(Json& logprobs, const std::vector<TokenLogprob>& tokens,
                                          int64_t& text_offset) const {
  for (const auto& token : tokens) {
    const std::string text = token_text(token.token_id);
    logprobs["text_offset"].push_back(text_offset);
    logprobs["token_logprobs"].push_back(finite_logprob(token.logprob));
    logprobs["tokens"].push_back(text);
    // vLLM's shape: the sampled token is always among its step's top logprobs.
    Json top = Json::object();
    for (const auto& [id, logprob] : token.top) top[token_text(id)] = finite_logprob(logprob);
    if (!top.contains(text)) top[text] = finite_logprob(token.logprob);
    logprobs["top_logprobs"].push_back(std::move(top));
    text_offset += static_cast<int64_t>(text.size());
  }
}

Json LogprobsFormatter::chat_content(const std::vector<TokenLogprob>& tokens) const {
  Json content = Json::array();
  for (const auto& token : tokens) {
    Json top = Json::array();
    for (const auto& [id, logprob] : token.top) {
      top.push_back({{"token", token_text(id)}, {"logprob", finite_logprob(logprob)}, {"bytes", token_bytes(id)}});
    }
    content.push_back({{"token", token_text(token.token_id)},
                       {"logprob", finite_logprob(token.logprob)},
                       {"bytes", token_bytes(token.token_id)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

}  // namespace tern::server
