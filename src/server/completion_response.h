#pragma once
// The /v1/completions response: "text_completion" objects, streamed or whole.
#include <optional>
#include <string>
#include <vector>

#include "server/generation_response.h"
#include "server/logprobs_formatter.h"

namespace tern::server {

class CompletionResponse : public GenerationResponse {
 public:
  // `echo_texts` holds each prompt's text when the client asked for echo (empty otherwise). `logprobs` is set when
  // the client asked for logprobs.
  CompletionResponse(ResponseContext context, std::vector<std::string> echo_texts, bool logprobs,
                     const Tokenizer& tokenizer);

  std::string start() override;

 private:
  struct Choice {
    std::string text;
    Json logprobs;  // completions logprobs object, or null
    int64_t text_offset = 0;
    std::optional<FinishReason> finish_reason;
  };

  std::string handle_output(size_t choice_index, const RequestOutput& output) override;
  std::string finish_stream() override { return {}; }
  Json full_response() override;
  const char* chunk_object() const override { return "text_completion"; }
  Json choice_json(size_t index, std::string text, Json logprobs, std::optional<FinishReason> reason) const;

  std::vector<std::string> echo_texts_;
  bool logprobs_;
  LogprobsFormatter formatter_;
  std::vector<Choice> choices_;
};

}  // namespace tern::server
