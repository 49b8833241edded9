#include "cli/commands.h"
#include "cli/options.h"
#include "cli/validators.h"
#include "core/error.h"
#include "gateway/gateway_server.h"

namespace tern::cli {

void add_gateway_command(CLI::App& app) {
  struct Options {
    gateway::GatewayConfig config;
    std::string admin_api_key;
    double health_interval_s = 1.0;
    double health_timeout_s = 2.0;
    double connect_timeout_s = 5.0;
    double prefill_timeout_s = 30.0;
    double drain_timeout_s = 30.0;
    std::vector<std::string> decode_urls;
    std::vector<std::string> decode_kv_endpoints;
  };
  auto options = std::make_shared<Options>();
  auto& config = options->config;
  CLI::App* cmd = app.add_subcommand("gateway", "Route OpenAI-compatible requests across tern replicas");
  cmd->add_option("--replica", config.replica_urls, "A replica's URL, http://host:port (repeatable)");
  cmd->add_option("--prefill", config.prefill_urls,
                  "Prefill/decode mode: a prefill replica's URL (repeatable); requests are prefilled there, their KV "
                  "sent to the decode replica chosen by --policy, and then run there");
  cmd->add_option("--decode", options->decode_urls, "Prefill/decode mode: a decode replica's URL (repeatable)");
  cmd->add_option("--decode-kv", options->decode_kv_endpoints,
                  "Prefill/decode mode: each --decode replica's KV transfer endpoint host:port, in the same order");
  cmd->add_option("--host", config.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", config.port, "Port to listen on (0: any free port, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--policy", config.policy, "cache_aware, round_robin or least_load")
      ->check(CLI::IsMember({"cache_aware", "round_robin", "least_load"}))->capture_default_str();
  CLI::Option* admin_api_key_option = cmd->add_option(
      "--admin-api-key", options->admin_api_key,
      "Enable /admin/replicas (add and remove replicas at run time), which then needs 'Authorization: Bearer "
      "<key>', as /metrics does (default: $TERN_GATEWAY_ADMIN_API_KEY; without a key both answer 403; an empty key "
      "is refused)");
  cmd->add_option("--allowed-replica-hosts", config.allowed_replica_hosts,
                  "Comma-separated IP addresses, CIDR ranges (10.0.0.0/8, fd00::/8) and host names that "
                  "/admin/replicas may add replicas on (default: any; --replica and --prefill hosts are trusted). "
                  "Link-local addresses and the gateway's own address are always refused")
      ->delimiter(',');
  cmd->add_flag("--metrics-without-auth", config.metrics_without_auth,
                "Serve /metrics to anyone, without the admin key (its labels name the replicas' URLs)");
  cmd->add_option("--threads", config.num_io_threads, "I/O threads")->check(positive())->capture_default_str();
  cmd->add_option("--cache-threshold", config.cache_aware.cache_threshold,
                  "cache_aware: least fraction of a request's text a replica must hold to be chosen for it")
      ->check(between(0.0, 1.0))->capture_default_str();
  cmd->add_option("--balance-abs-threshold", config.cache_aware.balance_abs_threshold,
                  "cache_aware: load is imbalanced when max - min outstanding exceeds this ...")
      ->check(non_negative())->capture_default_str();
  cmd->add_option("--balance-rel-threshold", config.cache_aware.balance_rel_threshold,
                  "... and max exceeds min times this; then requests go to the least loaded replica")
      ->check(between(1.0, 1e9))->capture_default_str();
  cmd->add_option("--max-tree-chars", config.cache_aware.max_tree_chars,
                  "cache_aware: bytes of request text remembered per replica (LRU beyond)")
      ->check(positive())->capture_default_str();
  cmd->add_option("--health-interval", options->health_interval_s, "Seconds between health checks of each replica")
      ->check(positive())->capture_default_str();
  cmd->add_option("--health-timeout", options->health_timeout_s, "Seconds a health check may take")
      ->check(positive())->capture_default_str();
  cmd->add_option("--connect-timeout", options->connect_timeout_s, "Seconds to connect to and send to a replica")
      ->check(positive())->capture_default_str();
  cmd->add_option("--prefill-timeout", options->prefill_timeout_s,
                  "Seconds a prefill replica has to answer (prefill and KV transfer); then the decode replica "
                  "prefills the request itself")
      ->check(positive())->capture_default_str();
  cmd->add_option("--drain-timeout", options->drain_timeout_s,
                  "Seconds to let in-flight requests (streams included) finish after SIGTERM or SIGINT before "
                  "closing their connections; new connections are refused meanwhile, a second signal stops at once")
      ->check(non_negative())->capture_default_str();
  cmd->callback([options, admin_api_key_option] {
    auto& config = options->config;
    config.admin_api_key = api_key_setting(admin_api_key_option->count() > 0, options->admin_api_key,
                                           "--admin-api-key", "TERN_GATEWAY_ADMIN_API_KEY");
    if (options->decode_kv_endpoints.size() != options->decode_urls.size()) {
      fail("gateway: {} --decode replicas but {} --decode-kv endpoints; give one per decode replica",
           options->decode_urls.size(), options->decode_kv_endpoints.size());
    }
    if (!options->decode_urls.empty() && config.prefill_urls.empty()) fail("gateway: --decode needs --prefill");
    for (size_t i = 0; i < options->decode_urls.size(); ++i) {
      config.replica_urls.push_back(options->decode_urls[i]);
      config.decode_kv_endpoints.emplace_back(options->decode_urls[i], options->decode_kv_endpoints[i]);
    }
    if (config.replica_urls.empty()) fail("gateway: give at least one --replica (or --prefill and --decode)");
    auto millis = [](double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)); };
    config.health_interval = millis(options->health_interval_s);
    config.health_timeout = millis(options->health_timeout_s);
    config.upstream.connect = millis(options->connect_timeout_s);
    config.prefill_timeout = millis(options->prefill_timeout_s);
    config.drain_timeout = millis(options->drain_timeout_s);
    gateway::GatewayServer server(config);
    server.run();
  });
}

}  // namespace tern::cli
