#include "gateway/prefill_router.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"
#include "server/openai_api.h"

namespace tern::gateway {

PrefillRouter::PrefillRouter(const std::vector<std::string>& prefill_urls,
                             const std::vector<std::pair<std::string, std::string>>& decode_kv_endpoints) {
  if (prefill_urls.empty()) fail("gateway: prefill/decode mode needs at least one --prefill replica");
  for (const auto& url : prefill_urls) prefill_.push_back(parse_replica_url(url));
  for (const auto& [url, endpoint] : decode_kv_endpoints) kv_endpoints_[parse_replica_url(url).url] = endpoint;
}

std::optional<PrefillTarget> PrefillRouter::route(std::string_view path, std::string_view body,
                                                  const ReplicaAddress& decode) {
  if (path != "/v1/completions" && path != "/v1/chat/completions") return std::nullopt;
  const auto endpoint = kv_endpoints_.find(decode.url);
  if (endpoint == kv_endpoints_.end()) return std::nullopt;
  // A body the decode replica will refuse anyway gets no prefill (and one nested too deep for dump() no parse).
  if (!json_nesting_within_limit(body)) return std::nullopt;
  auto request = parse_ordered_json(body, /*allow_exceptions=*/false);
  if (!request.is_object()) return std::nullopt;
  request["max_tokens"] = 1;
  if (request.contains("max_completion_tokens")) request["max_completion_tokens"] = 1;
  request["stream"] = false;
  request.erase("stream_options");
  request.erase("min_tokens");
  request["kv_transfer_params"] = {{"decode_url", endpoint->second}, {"request_key", server::random_hex_id()}};
  PrefillTarget target;
  target.prefill = prefill_[next_++ % prefill_.size()];
  target.body = request.dump();
  return target;
}

}  // namespace tern::gateway
