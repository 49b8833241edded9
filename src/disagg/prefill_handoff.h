#pragma once
// The prefill role of prefill/decode disaggregation. A completion or chat request that carries
// "kv_transfer_params": {"decode_url": "host:port", "request_key": "..."} (vLLM's field) is run here with
// max_tokens 1, which computes and caches its prompt's KV; the prompt's whole blocks go to the decode instance's KV
// endpoint chunk by chunk as they are cached (prefill_kv_stream.h), and the answer (the one-token completion) goes
// out once the decode side has imported them. Requests without the field are served as usual.
#include <cstdint>
#include <optional>

#include "disagg/kv_transport.h"
#include "server/openai_api.h"

namespace tern::disagg {

class PrefillHandoff {
 public:
  explicit PrefillHandoff(KvTransport& transport) : transport_(transport) {}

  // For OpenAiApi's generation hook (called on a worker thread; blocks while the prompt runs and transfers).
  // nullopt when the request carries no kv_transfer_params.
  std::optional<server::ApiResult> handle(const server::ApiRequest& request, server::PreparedGeneration& generation);

 private:
  KvTransport& transport_;
};

}  // namespace tern::disagg
