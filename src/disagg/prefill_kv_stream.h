#pragma once
// The prefill side's transfer loop: runs one-token prefills (already submitted) to their end while sending each
// prompt's whole blocks as the engine caches them. Chunked prefill caches a long prompt's blocks step by step, so
// the transfer of early blocks overlaps the prefill of later ones instead of starting after the whole prompt.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "disagg/kv_transport.h"
#include "engine/engine.h"

namespace tern::disagg {

struct PrefillKvTransfer {
  int64_t blocks_sent = 0;
  int64_t blocks_sent_during_prefill = 0;  // sent while some prompt was still being prefilled
  int64_t blocks_imported = 0;             // newly cached by the decode instance
  std::optional<std::string> error;        // the transfer failed (the prefills still ran to their end)
};

// `streams[i]` runs `prompts[i]`; each of its outputs goes to on_output(i, output). Returns once every stream has
// finished and the decode instance has answered every chunk sent (or the transfer failed).
PrefillKvTransfer send_kv_while_prefilling(KvSender& sender, std::span<const std::vector<int32_t>> prompts,
                                           std::span<const std::shared_ptr<RequestStream>> streams,
                                           int32_t blocks_per_chunk,
                                           const std::function<void(size_t, RequestOutput)>& on_output);

}  // namespace tern::disagg
