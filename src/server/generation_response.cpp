#include "server/generation_response.h"

#include "server/sse.h"

namespace tern::server {

GenerationResponse::GenerationResponse(ResponseContext context)
    : context_(std::move(context)),
      usage_per_prompt_(context_.num_prompts),
      choice_finished_(context_.num_prompts * static_cast<size_t>(context_.n), false) {}

std::string GenerationResponse::on_output(size_t prompt_index, const RequestOutput& output) {
  usage_per_prompt_.at(prompt_index) = output.usage;
  if (!output.error.empty() && error_.empty()) error_ = output.error;
  const size_t choice_index = prompt_index * static_cast<size_t>(context_.n) + static_cast<size_t>(output.index);
  if (output.finish_reason) choice_finished_.at(choice_index) = true;
  return handle_output(choice_index, output);
}

Usage GenerationResponse::usage() const {
  Usage total;
  for (const auto& usage : usage_per_prompt_) {
    total.prompt_tokens += usage.prompt_tokens;
    total.cached_tokens += usage.cached_tokens;
    total.completion_tokens += usage.completion_tokens;
    total.spec_drafts += usage.spec_drafts;
    total.spec_draft_tokens += usage.spec_draft_tokens;
    total.spec_accepted_tokens += usage.spec_accepted_tokens;
  }
  return total;
}

Json GenerationResponse::usage_json() const {
  const Usage total = usage();
  Json json = {{"prompt_tokens", total.prompt_tokens},
               {"total_tokens", total.prompt_tokens + total.completion_tokens},
               {"completion_tokens", total.completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", total.cached_tokens}}}};
  if (total.spec_drafts > 0) {
    // OpenAI's names for predicted tokens kept and discarded, and vLLM's spec-decode measures for this request.
    json["completion_tokens_details"] = {
        {"accepted_prediction_tokens", total.spec_accepted_tokens},
        {"rejected_prediction_tokens", total.spec_draft_tokens - total.spec_accepted_tokens}};
    json["speculative_decoding"] = {
        {"num_drafts", total.spec_drafts},
        {"num_draft_tokens", total.spec_draft_tokens},
        {"num_accepted_tokens", total.spec_accepted_tokens},
        {"acceptance_rate", static_cast<double>(total.spec_accepted_tokens) / total.spec_draft_tokens},
        {"mean_acceptance_length", 1.0 + static_cast<double>(total.spec_accepted_tokens) / total.spec_drafts}};
  }
  return json;
}

Json GenerationResponse::chunk(const char* object, Json choices) const {
  Json chunk = {{"id", context_.id}, {"object", object}, {"created", context_.created}, {"model", context_.model_name},
                {"choices", std::move(choices)}};
  if (context_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

HttpReply GenerationResponse::finish() {
  const ApiError engine_error(500, "the engine aborted the request: " + error_, std::nullopt, "engine_error");
  if (!context_.stream) {
    if (!error_.empty()) return HttpReply::error(engine_error);
    return HttpReply::json(full_response());
  }
  std::string bytes = finish_stream();
  if (!error_.empty()) bytes += sse_event(engine_error.to_json());
  if (context_.include_usage) {
    Json usage_chunk = chunk(chunk_object(), Json::array());
    usage_chunk["usage"] = usage_json();
    bytes += sse_event(usage_chunk);
  }
  bytes += sse_done();
  return {200, "text/event-stream", std::move(bytes)};
}

HttpReply GenerationResponse::abort() {
  if (!context_.stream) {
    return HttpReply::error(
        ApiError(503, "the server shut down before the request finished", std::nullopt, "server_shutting_down"));
  }
  std::string bytes;
  for (size_t choice_index = 0; choice_index < choice_finished_.size(); ++choice_index) {
    if (choice_finished_[choice_index]) continue;
    RequestOutput aborted;
    aborted.index = static_cast<int32_t>(choice_index % static_cast<size_t>(context_.n));
    aborted.finish_reason = FinishReason::kAbort;
    aborted.request_finished = true;
    // Straight to handle_output: on_output would take the empty output's usage as the prompt's.
    bytes += handle_output(choice_index, aborted);
    choice_finished_[choice_index] = true;
  }
  HttpReply rest = finish();
  rest.body.insert(0, bytes);
  return rest;
}

}  // namespace tern::server
