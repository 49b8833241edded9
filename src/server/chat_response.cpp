#include "server/chat_response.h"

#include "server/sse.h"

namespace tern::server {

Json chat_delta_json(const chat::ChatDelta& delta) {
  Json json = Json::object();
  if (!delta.reasoning_content.empty()) json["reasoning_content"] = delta.reasoning_content;
  if (!delta.content.empty()) json["content"] = delta.content;
  if (!delta.tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& call : delta.tool_calls) {
      Json entry = {{"index", call.index}};
      if (!call.id.empty()) {
        entry["id"] = call.id;
        entry["type"] = "function";
      }
      Json function = Json::object();
      if (!call.name.empty()) function["name"] = call.name;
      function["arguments"] = call.arguments;
      entry["function"] = std::move(function);
      calls.push_back(std::move(entry));
    }
    json["tool_calls"] = std::move(calls);
  }
  return json;
}

ChatResponse::ChatResponse(ResponseContext context, chat::ChatOutputOptions parser_options, bool logprobs,
                           const Tokenizer& tokenizer)
    : GenerationResponse(std::move(context)), parser_options_(std::move(parser_options)), logprobs_(logprobs),
      formatter_(tokenizer, context_.tokens_as_ids), choices_(context_.num_prompts * static_cast<size_t>(context_.n)) {
  if (streaming()) {
    for (auto& choice : choices_) choice.parser = std::make_unique<chat::ChatOutputParser>(parser_options_);
  }
}

Json ChatResponse::finish_reason_json(const Choice& choice) const {
  if (!choice.finish_reason) return nullptr;
  if (*choice.finish_reason == FinishReason::kStop && choice.has_tool_calls) return "tool_calls";
  return std::string(finish_reason_name(*choice.finish_reason));
}

std::string ChatResponse::start() {
  if (!streaming()) return {};
  std::string bytes;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Json choice = {{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                   {"finish_reason", nullptr}};
    bytes += sse_event(chunk("chat.completion.chunk", Json::array({std::move(choice)})));
  }
  return bytes;
}

std::string ChatResponse::handle_output(size_t choice_index, const RequestOutput& output) {
  Choice& choice = choices_.at(choice_index);
  choice.finish_reason = output.finish_reason;
  if (!streaming()) {
    choice.text += output.text;
    if (logprobs_) {
      for (auto& entry : formatter_.chat_content(output.logprobs)) choice.logprobs_content.push_back(std::move(entry));
    }
    return {};
  }
  chat::ChatDelta delta = choice.parser->feed(output.text);
  if (output.finish_reason) {
    chat::ChatDelta rest = choice.parser->flush();
    delta.reasoning_content += rest.reasoning_content;
    delta.content += rest.content;
    for (auto& call : rest.tool_calls) delta.tool_calls.push_back(std::move(call));
  }
  choice.has_tool_calls = choice.has_tool_calls || !delta.tool_calls.empty();
  const bool has_logprobs = logprobs_ && !output.logprobs.empty();
  if (delta.empty() && !has_logprobs && !output.finish_reason) return {};
  Json entry = {{"index", choice_index},
                {"delta", chat_delta_json(delta)},
                {"logprobs", has_logprobs ? Json{{"content", formatter_.chat_content(output.logprobs)}} : Json(nullptr)},
                {"finish_reason", finish_reason_json(choice)}};
  return sse_event(chunk("chat.completion.chunk", Json::array({std::move(entry)})));
}

Json ChatResponse::full_response() {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& choice = choices_[i];
    const chat::ChatMessage message = chat::ChatOutputParser::parse(choice.text, parser_options_);
    choice.has_tool_calls = !message.tool_calls.empty();
    choices.push_back({{"index", i},
                       {"message", message.to_openai_json()},
                       {"logprobs", logprobs_ ? Json{{"content", choice.logprobs_content}} : Json(nullptr)},
                       {"finish_reason", finish_reason_json(choice)}});
  }
  return {{"id", context_.id}, {"object", "chat.completion"}, {"created", context_.created},
          {"model", context_.model_name}, {"choices", std::move(choices)}, {"usage", usage_json()}};
}

}  // namespace tern::server
