#include "cli/streamed_generation.h"

namespace tern::cli {

StreamedGeneration run_streamed(EngineCore& core, uint64_t request_id, GenerateRequest request,
                                const std::function<void(std::string_view text)>& on_text,
                                const std::function<bool()>& should_stop) {
  StreamedGeneration result;
  const auto take = [&](const std::vector<RequestOutput>& outputs) {
    for (const auto& output : outputs) {
      if (output.request_id != request_id) continue;
      result.token_ids.insert(result.token_ids.end(), output.token_ids.begin(), output.token_ids.end());
      if (!output.text.empty()) {
        result.text += output.text;
        on_text(output.text);
      }
      if (output.finish_reason) result.finish_reason = *output.finish_reason;
      if (!output.error.empty()) result.error = output.error;
    }
  };
  core.add_request(request_id, std::move(request));
  bool aborted = false;
  while (core.has_unfinished_requests()) {
    if (!aborted && should_stop && should_stop()) {
      take(core.abort(request_id));
      result.finish_reason = FinishReason::kAbort;
      aborted = true;
      continue;
    }
    take(core.step());
  }
  return result;
}

}  // namespace tern::cli
