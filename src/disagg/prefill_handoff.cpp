#include "disagg/prefill_handoff.h"

#include <cstdio>

#include "backend/kv_block_transfer.h"
#include "core/error.h"
#include "server/request_body.h"

namespace tern::disagg {

using server::ApiError;
using server::HttpReply;

PrefillHandoff::PrefillHandoff(server::ServingModel& model, KvTransport& transport, int32_t blocks_per_chunk)
    : model_(model), transport_(transport), blocks_per_chunk_(blocks_per_chunk) {
  if (blocks_per_chunk < 1) fail("KV transfer: {} blocks per chunk; must be >= 1", blocks_per_chunk);
}

std::optional<server::ApiResult> PrefillHandoff::handle(const server::ApiRequest& request,
                                                        server::PreparedGeneration& generation) {
  const server::Json body = server::parse_request_body(request.body);
  const auto params = body.find("kv_transfer_params");
  if (params == body.end() || params->is_null()) return std::nullopt;
  if (!params->is_object() || !params->contains("decode_url") || !(*params)["decode_url"].is_string()) {
    throw ApiError(400, "kv_transfer_params must be an object with a string decode_url (host:port)",
                   "kv_transfer_params");
  }
  const std::string decode_endpoint = (*params)["decode_url"].get<std::string>();

  // Run each prompt for one token: that computes and caches its whole prompt blocks.
  Engine& engine = *generation.engine;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& engine_request : generation.requests) {
    engine_request.stop.max_tokens = 1;
    try {
      streams.push_back(engine.submit(engine_request));
    } catch (const Error& e) {
      for (auto& stream : streams) stream->cancel();
      throw ApiError(400, e.what(), "prompt");
    }
  }
  auto& response = *generation.response;
  std::string streamed = response.start();
  for (size_t i = 0; i < streams.size(); ++i) {
    while (auto output = streams[i]->next()) streamed += response.on_output(i, *output);
  }
  HttpReply reply = response.finish();
  if (reply.status != 200) return reply;

  try {
    const int64_t sent = transfer(decode_endpoint, generation);
    std::fprintf(stderr, "tern: KV of %zu prompt(s) sent to %s: %lld blocks newly cached there\n",
                 generation.requests.size(), decode_endpoint.c_str(), static_cast<long long>(sent));
  } catch (const Error& e) {
    // The client (a gateway) then sends the request to the decode instance anyway, which computes the prompt.
    return HttpReply::error(ApiError(502, e.what(), "kv_transfer_params", "kv_transfer_failed"));
  }
  if (response.streaming()) reply.body = streamed + reply.body;
  return reply;
}

int64_t PrefillHandoff::transfer(const std::string& decode_endpoint, const server::PreparedGeneration& generation) {
  Engine& engine = *generation.engine;
  const auto sender = transport_.connect(decode_endpoint);
  for (const auto& request : generation.requests) {
    const auto& prompt = request.prompt_token_ids;
    for (int32_t first = 0;;) {
      const auto chunk = engine.export_prompt_kv(prompt, first, blocks_per_chunk_);
      const int32_t num_blocks = kv_blocks_in_export(chunk);
      if (num_blocks == 0) break;
      sender->send(prompt, first, chunk);
      first += num_blocks;
    }
  }
  return sender->finish();
}

}  // namespace tern::disagg
