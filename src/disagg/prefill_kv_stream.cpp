#include "disagg/prefill_kv_stream.h"

#include <algorithm>

#include "core/error.h"

namespace tern::disagg {

PrefillKvTransfer send_kv_while_prefilling(KvSender& sender, std::span<const std::vector<int32_t>> prompts,
                                           std::span<const std::shared_ptr<RequestStream>> streams,
                                           int32_t blocks_per_chunk,
                                           const std::function<void(size_t, RequestOutput)>& on_output) {
  const size_t n = prompts.size();
  PrefillKvTransfer result;
  std::vector<bool> finished(n, false);  // the prompt's request has given its final output
  std::vector<bool> sent_all(n, false);  // and every block it cached has been sent
  std::vector<int32_t> next_block(n, 0);
  const auto take_outputs = [&](size_t i) {
    while (auto output = streams[i]->try_next()) {
      finished[i] = finished[i] || output->request_finished;
      on_output(i, std::move(*output));
    }
  };
  // Each send waits for the engine's next pass between steps (Engine::export_prompt_kv), which paces this loop
  // by the engine's steps.
  while (!result.error && !std::all_of(sent_all.begin(), sent_all.end(), [](bool b) { return b; })) {
    for (size_t i = 0; i < n; ++i) take_outputs(i);
    const bool prefilling = !std::all_of(finished.begin(), finished.end(), [](bool b) { return b; });
    for (size_t i = 0; i < n && !result.error; ++i) {
      if (sent_all[i]) continue;
      const bool was_finished = finished[i];  // then everything it will ever cache is cached by now
      try {
        const int32_t sent = sender.send(prompts[i], next_block[i], blocks_per_chunk);
        next_block[i] += sent;
        result.blocks_sent += sent;
        if (prefilling) result.blocks_sent_during_prefill += sent;
        sent_all[i] = sent == 0 && was_finished;
      } catch (const Error& e) {
        result.error = e.what();
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    while (!finished[i]) {
      auto output = streams[i]->next();
      if (!output) break;
      finished[i] = output->request_finished;
      on_output(i, std::move(*output));
    }
  }
  if (!result.error) {
    try {
      result.blocks_imported = sender.finish();
    } catch (const Error& e) {
      result.error = e.what();
    }
  }
  return result;
}

}  // namespace tern::disagg
