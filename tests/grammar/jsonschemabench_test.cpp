// JSONSchemaBench conformance: 320 real-world schemas, 40 from each of the eight datasets of Geng et al. 2025
// (arXiv:2501.10868), drawn by jsonschemabench/sample.mjs (see jsonschemabench/README.md). Each schema goes through
// the server's path (GrammarCache over the real Qwen3 vocabulary); then
// - declared coverage: the schema compiles (a refusal is a 400 naming the unsupported part);
// - compliance: every text the grammar accepts validates with ajv: seeded random walks to completion, and the
//   benchmark's own test instances that the matcher accepts (valid or not by the benchmark's labels);
// - the share of the benchmark's valid instances the grammar accepts (less than all: the grammar generates
//   properties in the schema's order and compact whitespace, a subset of the valid texts).
// Prints a table per dataset with the compile time percentiles; TERN_JSONSCHEMABENCH_REPORT=FILE also writes it as
// JSON, and TERN_JSONSCHEMABENCH_SCHEMAS=FILE runs another sample (sample.mjs DIR all draws every schema).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <regex>

#include "core/error.h"
#include "grammar/grammar_cache.h"
#include "json_validator.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

using nlohmann::ordered_json;

constexpr int kWalksPerSchema = 3;

// The paper's datasets in its order, with the declared coverage tern must reach on each: the best of the four
// open engines in the paper's Table 3 (Guidance, Llamacpp, Outlines, XGrammar; arXiv:2501.10868v2). GlaiveAI's
// best is XGrammar's 1.00; tern refuses one of the 40 sampled schemas, calculate_area_f8e04f89, which matches no
// value (all five properties are required and oneOf allows exactly one of the three groups of them): 39 of 40.
struct DatasetTarget {
  const char* name;
  double min_coverage;
};
constexpr DatasetTarget kDatasets[] = {
    {"Glaiveai2K", 0.975}, {"Github_easy", 0.91},    {"Snowplow", 0.95},     {"Github_medium", 0.79},
    {"Kubernetes", 0.98},  {"WashingtonPost", 0.97}, {"Github_hard", 0.69}, {"JsonSchemaStore", 0.76},
};
constexpr double kMinOverallCoverage = 0.90;

struct DatasetResult {
  size_t schemas = 0;
  size_t compiled = 0;
  size_t valid_instances = 0;
  size_t valid_accepted = 0;
  size_t invalid_instances = 0;
  size_t invalid_accepted = 0;  // labelled invalid by the benchmark, accepted by the grammar: ajv decides below
  size_t walks = 0;
  size_t ajv_failures = 0;
  std::vector<double> compile_ms;
  std::vector<std::string> refusals;
  std::vector<std::pair<double, std::string>> slowest;  // compile ms, schema
  std::vector<double> mask_us;
};

// Times the token masks of one seeded walk of up to kTimedMasks tokens (random allowed tokens, as a garbage model
// picks them): the per-token cost a server pays beside the model for this grammar.
constexpr size_t kTimedMasks = 32;
void time_masks(const std::shared_ptr<const CompiledGrammar>& compiled, std::vector<double>& mask_us) {
  GrammarMatcher matcher(compiled, 1);
  std::vector<uint32_t> mask(compiled->vocabulary().bitmask_words());
  std::mt19937_64 rng(7);
  for (size_t step = 0; step < kTimedMasks && !matcher.is_terminated(); ++step) {
    auto start = std::chrono::steady_clock::now();
    matcher.fill_next_token_bitmask(mask);
    mask_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    std::vector<int32_t> allowed;
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
    }
    if (allowed.empty() || !matcher.accept_token(allowed[rng() % allowed.size()])) break;
  }
}

std::filesystem::path schemas_path() {
  if (const char* env = std::getenv("TERN_JSONSCHEMABENCH_SCHEMAS")) return env;
  return std::filesystem::path(TERN_JSONSCHEMABENCH_DIR) / "schemas.jsonl";
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))];
}

// The reason of a refusal without the schema path and values, so that refusals group by kind.
std::string refusal_kind(const std::string& message) {
  std::string kind = std::regex_replace(message, std::regex("'[^']*'|\"[^\"]*\"|/[^ :]*|[0-9]+"), "_");
  return kind.substr(0, 90);
}

TEST(JsonSchemaBench, CoverageAndCompliance) {
  auto vocabulary = testing::load_byte_level_vocabulary("qwen3");
  GrammarCache cache(vocabulary, /*max_entries=*/4);
  cache.warm_up();

  std::map<std::string, DatasetResult> results;
  std::vector<testing::SchemaInstances> accepted_texts;
  std::map<std::string, std::string> dataset_of_case;
  std::ifstream lines(schemas_path());
  ASSERT_TRUE(lines) << "cannot read " << schemas_path();
  for (std::string line; std::getline(lines, line);) {
    ordered_json entry = ordered_json::parse(line);
    const std::string dataset = entry["dataset"];
    const std::string name = dataset + "/" + entry["id"].get<std::string>();
    DatasetResult& result = results[dataset];
    ++result.schemas;
    std::shared_ptr<const CompiledGrammar> compiled;
    auto start = std::chrono::steady_clock::now();
    try {
      compiled = cache.get(GrammarKind::kJsonSchema, entry["schema"].dump());
    } catch (const Error& e) {
      result.refusals.push_back(e.what());
      continue;
    }
    result.compile_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    result.slowest.push_back({result.compile_ms.back(), name});
    std::sort(result.slowest.rbegin(), result.slowest.rend());
    if (result.slowest.size() > 3) result.slowest.pop_back();
    ++result.compiled;

    testing::SchemaInstances texts{name, entry["schema"], {}};
    for (const auto& test : entry["tests"]) {
      const std::string text = test["data"].dump();
      GrammarMatcher matcher(compiled, 1);
      const bool accepted = matcher.accept_bytes(text) && matcher.is_accepting();
      const bool valid = test["valid"].get<bool>();
      (valid ? result.valid_instances : result.invalid_instances)++;
      if (accepted) {
        (valid ? result.valid_accepted : result.invalid_accepted)++;
        texts.instances.push_back(text);
      }
    }
    time_masks(compiled, result.mask_us);
    for (int seed = 1; seed <= kWalksPerSchema; ++seed) {
      texts.instances.push_back(testing::random_walk(compiled, static_cast<uint64_t>(seed)));
      ++result.walks;
    }
    dataset_of_case[name] = dataset;
    accepted_texts.push_back(std::move(texts));
  }

  testing::AjvReport ajv = testing::run_ajv(accepted_texts, "jsonschemabench");
  ASSERT_TRUE(ajv.ran);
  std::istringstream report_lines(ajv.output);
  for (std::string line; std::getline(report_lines, line);) {
    for (const char* prefix : {"FAIL ", "UNCHECKED "}) {
      if (line.rfind(prefix, 0) != 0) continue;
      std::string name = line.substr(std::string(prefix).size(), line.find(':') - std::string(prefix).size());
      results[dataset_of_case[name]].ajv_failures++;
    }
  }
  EXPECT_EQ(ajv.status, 0) << "texts the grammar accepts that do not validate:\n" << ajv.output;

  ordered_json report = ordered_json::object();
  size_t total_schemas = 0, total_compiled = 0;
  std::vector<double> all_compile_ms, all_mask_us;
  std::printf("%-16s %7s %9s %12s %14s %9s %11s %11s %9s %9s\n", "dataset", "schemas", "coverage", "valid acc.",
              "invalid acc.", "ajv fail", "compile p50", "compile p99", "mask p50", "mask p99");
  for (const DatasetTarget& target : kDatasets) {
    const DatasetResult& r = results[target.name];
    const double coverage = r.schemas ? static_cast<double>(r.compiled) / static_cast<double>(r.schemas) : 0;
    std::printf("%-16s %7zu %8.1f%% %5zu / %-5zu %6zu / %-6zu %9zu %9.1fms %9.1fms %7.0fus %7.0fus\n", target.name,
                r.schemas, 100 * coverage, r.valid_accepted, r.valid_instances, r.invalid_accepted, r.invalid_instances,
                r.ajv_failures, percentile(r.compile_ms, 0.5), percentile(r.compile_ms, 0.99),
                percentile(r.mask_us, 0.5), percentile(r.mask_us, 0.99));
    std::map<std::string, size_t> refusal_kinds;
    for (const auto& refusal : r.refusals) refusal_kinds[refusal_kind(refusal)]++;
    for (const auto& [kind, count] : refusal_kinds) std::printf("    refused x%zu: %s\n", count, kind.c_str());
    report[target.name] = {{"schemas", r.schemas},
                           {"compiled", r.compiled},
                           {"declared_coverage", coverage},
                           {"valid_instances", r.valid_instances},
                           {"valid_accepted", r.valid_accepted},
                           {"invalid_instances", r.invalid_instances},
                           {"invalid_accepted_by_grammar", r.invalid_accepted},
                           {"random_walks", r.walks},
                           {"ajv_failures", r.ajv_failures},
                           {"compile_ms_p50", percentile(r.compile_ms, 0.5)},
                           {"compile_ms_p99", percentile(r.compile_ms, 0.99)},
                           {"mask_us_p50", percentile(r.mask_us, 0.5)},
                           {"mask_us_p99", percentile(r.mask_us, 0.99)},
                           {"slowest_compiles_ms", r.slowest},
                           {"refusals", r.refusals}};
    if (!std::getenv("TERN_JSONSCHEMABENCH_SCHEMAS")) {
      EXPECT_GE(coverage, target.min_coverage) << target.name;
    }
    total_schemas += r.schemas;
    total_compiled += r.compiled;
    all_compile_ms.insert(all_compile_ms.end(), r.compile_ms.begin(), r.compile_ms.end());
    all_mask_us.insert(all_mask_us.end(), r.mask_us.begin(), r.mask_us.end());
  }
  const double overall = static_cast<double>(total_compiled) / static_cast<double>(std::max<size_t>(1, total_schemas));
  std::printf("%-16s %7zu %8.1f%% %*s compile p50 %.1f ms, p99 %.1f ms, max %.1f ms; mask p50 %.0f us, p99 %.0f us\n",
              "all", total_schemas, 100 * overall, 42, "", percentile(all_compile_ms, 0.5),
              percentile(all_compile_ms, 0.99), percentile(all_compile_ms, 1.0), percentile(all_mask_us, 0.5),
              percentile(all_mask_us, 0.99));
  report["all"] = {{"schemas", total_schemas},
                   {"compiled", total_compiled},
                   {"declared_coverage", overall},
                   {"compile_ms_p50", percentile(all_compile_ms, 0.5)},
                   {"compile_ms_p99", percentile(all_compile_ms, 0.99)},
                   {"compile_ms_max", percentile(all_compile_ms, 1.0)},
                   {"mask_us_p50", percentile(all_mask_us, 0.5)},
                   {"mask_us_p99", percentile(all_mask_us, 0.99)}};
  EXPECT_GE(overall, kMinOverallCoverage);
  if (const char* path = std::getenv("TERN_JSONSCHEMABENCH_REPORT")) std::ofstream(path) << report.dump(2) << "\n";
}

}  // namespace
}  // namespace tern::grammar
