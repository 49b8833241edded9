// `tern bench-grammar`: grammar compile time and per-token mask time on real vocabularies, for a JSON schema,
// JSON object mode and a regex. A seeded garbage model (random allowed tokens) drives the matchers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/error.h"
#include "grammar/grammar_cache.h"
#include "grammar/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {
namespace {

// A typical structured-output schema: nested objects, arrays, enums, numbers with ranges, a pattern, a format.
constexpr const char* kDefaultSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "minLength": 1, "maxLength": 64},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "status": {"enum": ["active", "inactive", "pending"]},
    "address": {
      "type": "object",
      "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}
      },
      "required": ["street", "city"]
    },
    "orders": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}, "price": {"type": "number"}},
      "required": ["sku", "quantity"]}}
  },
  "required": ["id", "name", "age", "status"]
})";

constexpr const char* kDefaultRegex = R"((?:[A-Z][a-z]+ ){1,3}\d{1,5}, [A-Za-z .]+, [A-Z]{2} \d{5})";

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("bench-grammar: cannot read '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))];
}

std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  std::vector<int32_t> eos;
  if (tokenizer.eos_id()) eos.push_back(*tokenizer.eos_id());
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), std::move(eos));
}

using Clock = std::chrono::steady_clock;
double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Mask time per token over seeded random walks (restarted on termination or after max_walk_tokens). Each walk is
// one request. With fresh_grammar_per_walk every walk gets a grammar compiled anew, as the server does for a schema
// its GrammarCache has not seen; otherwise all walks share one compile, as GrammarCache hits on a repeated schema
// do (the nodes classified on first use by one request stay classified for the next). compile_ms collects the
// compile times (wall).
nlohmann::json bench_masks(const std::function<std::shared_ptr<const grammar::CompiledGrammar>()>& compile,
                           bool fresh_grammar_per_walk, size_t num_masks, size_t max_walk_tokens, uint64_t seed,
                           std::vector<double>& compile_ms) {
  auto timed_compile = [&] {
    auto start = Clock::now();
    auto compiled = compile();
    compile_ms.push_back(micros_since(start) / 1e3);
    return compiled;
  };
  auto compiled = timed_compile();
  const grammar::TokenVocabulary& vocabulary = compiled->vocabulary();
  auto matcher = std::make_unique<grammar::GrammarMatcher>(compiled, 1);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(vocabulary.bitmask_words());
  std::vector<double> mask_us, accept_us;
  std::vector<int32_t> allowed;
  size_t walk_tokens = 0, num_walks = 1;
  while (mask_us.size() < num_masks) {
    auto start = Clock::now();
    matcher->fill_next_token_bitmask(mask);
    mask_us.push_back(micros_since(start));
    allowed.clear();
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        if (!vocabulary.is_eos(id)) allowed.push_back(id);
      }
    }
    bool end = allowed.empty() || walk_tokens >= max_walk_tokens || (matcher->is_accepting() && rng() % 4 == 0);
    if (end) {
      if (fresh_grammar_per_walk) {
        matcher = std::make_unique<grammar::GrammarMatcher>(timed_compile(), 1);
      } else {
        matcher->reset();
      }
      walk_tokens = 0;
      ++num_walks;
      continue;
    }
    int32_t token = allowed[rng() % allowed.size()];
    start = Clock::now();
    if (!matcher->accept_token(token)) fail("bench-grammar: token {} was allowed but not accepted", token);
    accept_us.push_back(micros_since(start));
    ++walk_tokens;
  }
  // The floor any mask costs: clearing and filling the bitmask words.
  std::vector<double> floor_us;
  for (int k = 0; k < 200; ++k) {
    auto start = Clock::now();
    std::fill(mask.begin(), mask.end(), 0u);
    for (size_t w = 0; w < mask.size(); ++w) mask[w] |= static_cast<uint32_t>(w * 2654435761u);
    floor_us.push_back(micros_since(start));
  }
  return {
      {"num_masks", mask_us.size()},
      {"num_walks", num_walks},
      {"mask_us_median", percentile(mask_us, 0.5)},
      {"mask_us_p99", percentile(mask_us, 0.99)},
      {"mask_us_max", percentile(mask_us, 1.0)},
      {"accept_us_median", percentile(accept_us, 0.5)},
      {"num_compiles", compile_ms.size()},
      {"compile_ms_first", compile_ms.front()},
      {"compile_ms_median", percentile(compile_ms, 0.5)},
      {"compile_ms_max", percentile(compile_ms, 1.0)},
      {"baseline_bitmask_fill_us_median", percentile(floor_us, 0.5)},
  };
}

}  // namespace

void add_bench_grammar_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> tokenizers;
    std::string schema;
    std::string regex = kDefaultRegex;
    size_t num_masks = 3000;
    size_t max_walk_tokens = 256;
    bool reuse_grammar = false;
    bool cold = false;
    unsigned threads = 0;
    bool precompute_all = false;
    uint64_t seed = 1;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench-grammar",
      "Measure grammar compile time and token-mask time per token (median, p99) for a JSON schema, JSON object "
      "mode and a regex on real vocabularies; prints JSON");
  cmd->add_option("--tokenizer", options->tokenizers, "Directory with tokenizer.json (repeatable)")->required();
  cmd->add_option("--schema", options->schema, "JSON schema file (default: a built-in typical schema)");
  cmd->add_option("--regex", options->regex, "Regular expression to measure");
  cmd->add_option("--masks", options->num_masks, "Masks measured per grammar")->check(positive());
  cmd->add_option("--walk-tokens", options->max_walk_tokens, "Tokens before a random walk restarts")
      ->check(positive());
  cmd->add_flag("--reuse-grammar", options->reuse_grammar,
                "Share one compiled grammar across all walks (GrammarCache hits on a repeated schema); default: "
                "compile a fresh grammar per walk (a schema the server has not seen)");
  cmd->add_flag("--cold", options->cold,
                "Skip the warm-up a server does at start (GrammarCache::warm_up): the first schema then walks every "
                "region shape itself");
  cmd->add_option("--threads", options->threads, "Threads of the token precomputation (0: up to 8 cores)");
  cmd->add_option("--seed", options->seed, "Seed of the random walks");
  cmd->add_flag("--precompute-all", options->precompute_all,
                "Classify tokens for every automaton node at compile time (default: string-content-like nodes at "
                "compile time, the others on first use)");
  cmd->callback([options] {
    std::string schema = options->schema.empty() ? kDefaultSchema : read_text_file(options->schema);
    const std::vector<std::pair<grammar::GrammarKind, std::string>> grammars = {
        {grammar::GrammarKind::kJsonSchema, schema},
        {grammar::GrammarKind::kJsonObject, ""},
        {grammar::GrammarKind::kRegex, options->regex},
    };
    nlohmann::json report = {
        {"machine", {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()}}},
        {"config",
         {{"masks", options->num_masks}, {"walk_tokens", options->max_walk_tokens}, {"seed", options->seed},
          {"threads", options->threads}, {"precompute_all", options->precompute_all},
          {"reuse_grammar", options->reuse_grammar}, {"cold", options->cold}, {"schema", options->schema.empty() ? "built-in" : options->schema},
          {"regex", options->regex}}},
        {"results", nlohmann::json::array()},
    };
    grammar::CompileOptions compile_options;
    compile_options.num_threads = options->threads;
    compile_options.precompute_all = options->precompute_all;
    for (const auto& dir : options->tokenizers) {
      auto vocabulary = grammar_vocabulary(Tokenizer::load(dir));
      // As the server's GrammarCache does, every compile for this vocabulary shares one RegionWalkCache: the first
      // grammar pays for its region walks (compile_ms_max), later ones only for shapes not seen before.
      compile_options.region_walks = std::make_shared<grammar::RegionWalkCache>(vocabulary->fingerprint());
      double warm_up_ms = 0.0;
      if (!options->cold) {
        // The server warms its GrammarCache at start (GrammarCache::warm_up) before any request compiles.
        const auto start = std::chrono::steady_clock::now();
        grammar::GrammarCache(vocabulary, 1, compile_options).warm_up();
        warm_up_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "%s: warm-up %.1f ms\n", dir.c_str(), warm_up_ms);
      }
      for (const auto& [kind, source] : grammars) {
        std::vector<double> compile_ms;
        std::shared_ptr<const grammar::CompiledGrammar> compiled;
        auto compile = [&] {
          compiled = grammar::CompiledGrammar::compile(kind, source, vocabulary, compile_options);
          return compiled;
        };
        nlohmann::json result = bench_masks(compile, !options->reuse_grammar, options->num_masks,
                                            options->max_walk_tokens, options->seed, compile_ms);
        result["tokenizer"] = dir;
        result["warm_up_ms"] = warm_up_ms;
        result["vocab_size"] = vocabulary->size();
        result["grammar"] = grammar::grammar_kind_name(kind);
        result["pda_nodes"] = compiled->pda().nodes.size();
        result["uncertain_tokens_total"] = compiled->token_masks().num_uncertain();
        result["mask_cache_mb"] = static_cast<double>(compiled->token_masks().memory_bytes()) / 1e6;
        report["results"].push_back(result);
        std::fprintf(stderr, "%s %s: compile %.1f ms (first %.1f), mask median %.1f us, p99 %.1f us\n", dir.c_str(),
                     std::string(grammar::grammar_kind_name(kind)).c_str(), result["compile_ms_median"].get<double>(),
                     result["compile_ms_first"].get<double>(), result["mask_us_median"].get<double>(),
                     result["mask_us_p99"].get<double>());
      }
    }
    std::printf("%s\n", report.dump(2).c_str());
  });
}

}  // namespace tern::cli
