#pragma once
// One request run to its end on an engine core, its text handed out as the detokenizer completes it: what
// `tern generate --prompt` and `tern chat` print while the model writes.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_core.h"

namespace tern::cli {

struct StreamedGeneration {
  std::vector<int32_t> token_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::kStop;
  std::string error;  // why the engine aborted the request, when it did
};

// `core` must detokenize (a TextStreamFactory). `should_stop` is asked between steps; when it answers true the
// request is aborted (finish reason "abort") and what was generated so far is returned.
StreamedGeneration run_streamed(EngineCore& core, uint64_t request_id, GenerateRequest request,
                                const std::function<void(std::string_view text)>& on_text,
                                const std::function<bool()>& should_stop = {});

}  // namespace tern::cli
