// Seeded, time-bounded fuzzing: random JSON schemas (outputs validated with ajv; EOS only when accepting, checked
// on every step by random_walk) and mutated grammar/regex/schema sources, which must compile or throw tern::Error,
// never crash or hang.
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "json_validator.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

using nlohmann::json;

class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint64_t seed) : rng_(seed) {}

  json schema() {
    defs_ = json::object();
    json root = node(0);
    if (!defs_.empty()) root["$defs"] = defs_;
    return root;
  }

 private:
  size_t pick(size_t n) { return rng_() % n; }
  bool chance(int percent) { return static_cast<int>(pick(100)) < percent; }

  json scalar_value() {
    switch (pick(5)) {
      case 0: return static_cast<int>(pick(200)) - 100;
      case 1: return json(std::string("v") + std::to_string(pick(50)));
      case 2: return chance(50);
      case 3: return nullptr;
      default: return 0.5 * static_cast<double>(pick(9));
    }
  }

  json node(int depth) {
    size_t kinds = depth >= 3 ? 7 : 12;
    switch (pick(kinds)) {
      case 0: {
        json s = {{"type", "string"}};
        if (chance(30)) s["minLength"] = pick(4);
        if (chance(30)) s["maxLength"] = pick(6) + 4;
        if (!s.contains("minLength") && !s.contains("maxLength") && chance(30)) {
          const char* patterns[] = {"^[a-z]{1,4}$", "\\d+-\\w?", "(x|yz)*\"", "[^\\\\]{0,3}", "é+\\.", "\\S{2}"};
          s["pattern"] = patterns[pick(6)];
        } else if (!s.contains("minLength") && !s.contains("maxLength") && chance(20)) {
          const char* formats[] = {"date", "time", "date-time", "email", "uuid", "ipv4", "uri"};
          s["format"] = formats[pick(7)];
        }
        return s;
      }
      case 1:
      case 2: {
        json s = {{"type", chance(50) ? "integer" : "number"}};
        int64_t lo = static_cast<int64_t>(pick(2000)) - 1000;
        if (chance(50)) s[chance(70) ? "minimum" : "exclusiveMinimum"] = lo;
        if (chance(50)) s[chance(70) ? "maximum" : "exclusiveMaximum"] = lo + static_cast<int64_t>(pick(3000)) + 2;
        return s;
      }
      case 3: return {{"type", chance(50) ? "boolean" : "null"}};
      case 4: {
        json values = json::array();
        for (size_t k = 0, n = pick(4) + 1; k < n; ++k) values.push_back(scalar_value());
        return {{"enum", values}};
      }
      case 5: return {{"const", scalar_value()}};
      case 6: return json::object();  // any value
      case 7:
      case 8: {
        json s = {{"type", "object"}, {"properties", json::object()}};
        json required = json::array();
        for (size_t k = 0, n = pick(4); k < n; ++k) {
          std::string name = std::string(1, static_cast<char>('a' + pick(6))) + (chance(20) ? "é\"" : "");
          s["properties"][name] = node(depth + 1);
          bool listed = std::find(required.begin(), required.end(), json(name)) != required.end();
          if (chance(50) && !listed) required.push_back(name);
        }
        if (!required.empty()) s["required"] = required;
        if (chance(30)) s["additionalProperties"] = chance(50) ? json(chance(50)) : node(depth + 1);
        return s;
      }
      case 9: {
        json s = {{"type", "array"}};
        if (chance(30)) {
          s["prefixItems"] = json::array({node(depth + 1), node(depth + 1)});
          if (chance(50)) s["items"] = false;
        } else {
          s["items"] = node(depth + 1);
        }
        size_t lo = pick(3);
        if (chance(50)) s["minItems"] = lo;
        if (chance(50)) s["maxItems"] = lo + pick(3);
        return s;
      }
      case 10: {
        json branches = json::array();
        for (size_t k = 0, n = pick(3) + 1; k < n; ++k) branches.push_back(node(depth + 1));
        return {{"anyOf", branches}};
      }
      default: {
        std::string name = "d" + std::to_string(defs_.size());
        defs_[name] = json::object();  // reserve, so nested definitions get other names
        defs_[name] = node(depth + 1);
        return {{"$ref", "#/$defs/" + name}};
      }
    }
  }

  std::mt19937_64 rng_;
  json defs_;
};

TEST(Fuzz, RandomSchemasProduceValidOutputs) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto real_vocabulary = testing::load_byte_level_vocabulary("llama3");
  auto tiny = testing::tiny_vocabulary({"{\"", "\":", "\",", "\"}", "[]", "{}", "12", "-1", "true", "null"});
  std::vector<testing::SchemaInstances> cases;
  size_t num_schemas = 0, num_rejected = 0;
  for (uint64_t seed = 1; std::chrono::steady_clock::now() < deadline || num_schemas < 20; ++seed) {
    json schema = SchemaGenerator(seed).schema();
    // Every fourth schema on the real 128K vocabulary, the rest on a tiny one (fast compiles, more schemas).
    auto vocabulary = seed % 4 == 0 ? real_vocabulary : tiny;
    std::shared_ptr<const CompiledGrammar> grammar;
    try {
      grammar = CompiledGrammar::compile(GrammarKind::kJsonSchema, schema.dump(), vocabulary);
    } catch (const Error&) {
      ++num_rejected;  // e.g. an empty integer range: an error is a fine answer, a crash is not
      continue;
    }
    ++num_schemas;
    testing::SchemaInstances c{"seed " + std::to_string(seed), schema, {}};
    for (int k = 0; k < 3; ++k) {
      c.instances.push_back(testing::random_walk(grammar, seed * 10 + k, {.soft_cap_tokens = 20, .mask_checks_per_step = 4}));
    }
    cases.push_back(std::move(c));
    if (::testing::Test::HasFailure()) break;
  }
  std::printf("fuzz: %zu schemas compiled, %zu rejected with errors\n", num_schemas, num_rejected);
  EXPECT_GT(num_schemas, 10u);
  testing::expect_valid_with_ajv(cases, "fuzz");
}

TEST(Fuzz, MutatedSourcesCompileOrThrow) {
  const std::vector<std::pair<GrammarKind, std::string>> seeds = {
      {GrammarKind::kEbnf, R"g(root ::= "{" ws (pair ("," ws pair)*)? "}"  # c
pair ::= [a-z]+ ws ":" ws value
value ::= root | "\"" [^"\\]* "\"" | [0-9]{1,3} | /x+y?/
ws ::= [ \t]*)g"},
      {GrammarKind::kRegex, R"((?:[a-f\d]{2}:){5}[a-f\d]{2}|\w+@(?<d>[^\s.]+)\.\w{2,}?)"},
      {GrammarKind::kJsonSchema, R"({"type":"object","properties":{"a":{"type":"array","items":{"$ref":"#/$defs/x"},"maxItems":2},"b":{"enum":[1,"2"]}},"required":["a"],"$defs":{"x":{"anyOf":[{"type":"integer","minimum":3},{"type":"string","pattern":"^a+$"}]}}})"},
  };
  const std::string alphabet = "()[]{}|*+?.^$\\\"':,/-#=0123456789aAzZ \n\té";
  auto vocabulary = testing::tiny_vocabulary();
  std::mt19937_64 rng(12345);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  size_t compiled = 0, rejected = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto& [kind, source] = seeds[rng() % seeds.size()];
    std::string mutated = source;
    for (size_t k = 0, n = 1 + rng() % 4; k < n && !mutated.empty(); ++k) {
      size_t at = rng() % mutated.size();
      switch (rng() % 3) {
        case 0: mutated.erase(at, 1 + rng() % 3); break;
        case 1: mutated.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: mutated[at] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    try {
      auto grammar = CompiledGrammar::compile(kind, mutated, vocabulary);
      GrammarMatcher matcher(grammar);
      matcher.next_token_bitmask();
      ++compiled;
    } catch (const Error& e) {
      EXPECT_GT(std::string(e.what()).size(), 10u);
      ++rejected;
    }
  }
  std::printf("mutations: %zu compiled, %zu rejected with errors\n", compiled, rejected);
  EXPECT_GT(compiled + rejected, 100u);
}

}  // namespace
}  // namespace tern::grammar
