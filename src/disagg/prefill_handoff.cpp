#include "disagg/prefill_handoff.h"

#include <cstdio>

#include "core/error.h"
#include "disagg/prefill_kv_stream.h"
#include "server/request_body.h"

namespace tern::disagg {

using server::ApiError;
using server::HttpReply;

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

  // Run each prompt for one token: that computes and caches its whole prompt blocks, which go to the decode
  // instance as they are cached.
  Engine& engine = *generation.engine;
  std::unique_ptr<KvSender> sender;
  try {
    sender = transport_.connect(decode_endpoint, engine);
  } catch (const Error& e) {
    // The client (a gateway) then sends the request to the decode instance anyway, which computes the prompt.
    return HttpReply::error(ApiError(502, e.what(), "kv_transfer_params", "kv_transfer_failed"));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (auto& engine_request : generation.requests) {
    engine_request.stop.max_tokens = 1;
    prompts.push_back(engine_request.prompt_token_ids);
    try {
      streams.push_back(engine.submit(engine_request));
    } catch (const Error& e) {
      for (auto& stream : streams) stream->cancel();
      throw ApiError(400, e.what(), "prompt");
    }
  }
  auto& response = *generation.response;
  std::string streamed = response.start();
  const PrefillKvTransfer transfer =
      send_kv_while_prefilling(*sender, prompts, streams, transport_.blocks_per_chunk(),
                               [&](size_t i, RequestOutput output) { streamed += response.on_output(i, output); });
  HttpReply reply = response.finish();
  if (reply.status != 200) return reply;
  if (transfer.error) return HttpReply::error(ApiError(502, *transfer.error, "kv_transfer_params", "kv_transfer_failed"));
  std::fprintf(stderr,
               "tern: KV of %zu prompt(s) sent to %s (%s): %lld blocks, %lld of them during the prefill; %lld newly "
               "cached there\n",
               prompts.size(), decode_endpoint.c_str(), std::string(transport_.name()).c_str(),
               static_cast<long long>(transfer.blocks_sent), static_cast<long long>(transfer.blocks_sent_during_prefill),
               static_cast<long long>(transfer.blocks_imported));
  if (response.streaming()) reply.body = streamed + reply.body;
  return reply;
}

}  // namespace tern::disagg
