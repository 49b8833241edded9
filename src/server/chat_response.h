#pragma once
// The /v1/chat/completions response: "chat.completion" (whole) or "chat.completion.chunk" (streamed) objects whose
// messages are parsed into reasoning_content, content and tool_calls by the chat layer's output parser.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_output_parser.h"
#include "server/generation_response.h"
#include "server/logprobs_formatter.h"

namespace tern::server {

class ChatResponse : public GenerationResponse {
 public:
  // `parser_options` come from the chat template and the rendered prompt (ServingModel::output_options).
  ChatResponse(ResponseContext context, chat::ChatOutputOptions parser_options, bool logprobs,
               const Tokenizer& tokenizer);

  std::string start() override;

 private:
  struct Choice {
    std::unique_ptr<chat::ChatOutputParser> parser;  // streaming only
    std::string text;                                 // non-streaming: the whole output
    Json logprobs_content = Json::array();
    bool has_tool_calls = false;
    std::optional<FinishReason> finish_reason;
  };

  std::string handle_output(size_t choice_index, const RequestOutput& output) override;
  std::string finish_stream() override { return {}; }
  Json full_response() override;
  const char* chunk_object() const override { return "chat.completion.chunk"; }
  // "tool_calls" when the model called tools and stopped by itself, as OpenAI reports it.
  Json finish_reason_json(const Choice& choice) const;

  chat::ChatOutputOptions parser_options_;
  bool logprobs_;
  LogprobsFormatter formatter_;
  std::vector<Choice> choices_;
};

// The delta object of a chat chunk: only the parts the delta has.
Json chat_delta_json(const chat::ChatDelta& delta);

}  // namespace tern::server
