#pragma once
// The gateway's prefill/decode mode (--prefill URL ... --decode URL ... --decode-kv HOST:PORT ...): before a
// generation request goes to its decode replica (chosen by the pool's policy as usual), it is sent to a prefill
// replica with max_tokens 1 and "kv_transfer_params" naming that decode replica's KV endpoint; the prefill replica
// answers once the prompt's KV sits in the decode replica's prefix cache, and the original request then runs on the
// decode replica, which computes only what did not arrive. A prefill hop that fails costs nothing but time: the
// decode replica computes the prompt itself.
#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/replica_address.h"

namespace tern::gateway {

struct PrefillTarget {
  ReplicaAddress prefill;
  std::string body;  // the request to send it
};

class PrefillRouter {
 public:
  // `decode_kv_endpoints`: decode replica URL -> its KV transfer endpoint (host:port). Throws tern::Error naming a
  // malformed URL.
  PrefillRouter(const std::vector<std::string>& prefill_urls,
                const std::vector<std::pair<std::string, std::string>>& decode_kv_endpoints);

  // The prefill hop for a request to `decode` (round-robin over the prefill replicas); nullopt when the request
  // is no generation or `decode` has no KV endpoint. Thread-safe.
  std::optional<PrefillTarget> route(std::string_view path, std::string_view body, const ReplicaAddress& decode);

 private:
  std::vector<ReplicaAddress> prefill_;
  std::map<std::string, std::string> kv_endpoints_;  // by normalized decode URL
  std::atomic<size_t> next_{0};
};

}  // namespace tern::gateway
