#include "server/completion_response.h"

#include "server/sse.h"

namespace tern::server {

CompletionResponse::CompletionResponse(ResponseContext context, std::vector<std::string> echo_texts, bool logprobs,
                                       const Tokenizer& tokenizer)
    : GenerationResponse(std::move(context)), echo_texts_(std::move(echo_texts)), logprobs_(logprobs),
      formatter_(tokenizer, context_.tokens_as_ids), choices_(context_.num_prompts * static_cast<size_t>(context_.n)) {
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& choice = choices_[i];
    if (!echo_texts_.empty()) choice.text = echo_texts_[i / static_cast<size_t>(context_.n)];
    choice.text_offset = static_cast<int64_t>(choice.text.size());
    choice.logprobs = logprobs_ ? LogprobsFormatter::empty_completion() : Json(nullptr);
  }
}

Json CompletionResponse::choice_json(size_t index, std::string text, Json logprobs,
                                     std::optional<FinishReason> reason) const {
  return {{"index", index},
          {"text", std::move(text)},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", reason ? Json(std::string(finish_reason_name(*reason))) : Json(nullptr)},
          {"stop_reason", nullptr}};
}

std::string CompletionResponse::start() {
  if (!streaming() || echo_texts_.empty()) return {};
  std::string bytes;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Json logprobs = logprobs_ ? LogprobsFormatter::empty_completion() : Json(nullptr);
    bytes += sse_event(chunk("text_completion", Json::array({choice_json(i, choices_[i].text, logprobs, {})})));
  }
  return bytes;
}

std::string CompletionResponse::handle_output(size_t choice_index, const RequestOutput& output) {
  Choice& choice = choices_.at(choice_index);
  choice.finish_reason = output.finish_reason;
  if (!streaming()) {
    choice.text += output.text;
    if (logprobs_) formatter_.append_completion(choice.logprobs, output.logprobs, choice.text_offset);
    return {};
  }
  if (output.text.empty() && output.logprobs.empty() && !output.finish_reason) return {};
  Json logprobs = nullptr;
  if (logprobs_) {
    logprobs = LogprobsFormatter::empty_completion();
    formatter_.append_completion(logprobs, output.logprobs, choice.text_offset);
  }
  return sse_event(chunk("text_completion",
                         Json::array({choice_json(choice_index, output.text, std::move(logprobs), output.finish_reason)})));
}

Json CompletionResponse::full_response() {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices.push_back(choice_json(i, choices_[i].text, choices_[i].logprobs, choices_[i].finish_reason));
  }
  return {{"id", context_.id}, {"object", "text_completion"}, {"created", context_.created},
          {"model", context_.model_name}, {"choices", std::move(choices)}, {"usage", usage_json()}};
}

}  // namespace tern::server
