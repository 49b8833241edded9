#include "grammar/json_schema_converter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"
#include "grammar/integer_range.h"
#include "grammar/json_schema_formats.h"
#include "grammar/json_schema_pattern.h"
#include "grammar/json_schema_validator.h"
#include "grammar/regex_parser.h"

namespace tern::grammar {
namespace {

// Ordered: object properties are generated in the schema's order, as OpenAI's structured outputs write them.
using json = nlohmann::ordered_json;

// Bounds on the work and the output of one conversion, so that any schema a request carries is refused quickly and
// with bounded memory. A step is a sub-schema visited or inspected, or a JSON value an allOf merge copies: a schema
// that refers to itself twice per level (an allOf, anyOf or oneOf of two $refs to itself) would otherwise take
// 2^depth of them. JSON Schema Store's largest schemas take under 20,000 steps, and where the automaton accepts
// their grammars those are under 256 KiB.
constexpr size_t kMaxConversionSteps = 200'000;
constexpr size_t kMaxGrammarBytes = size_t{4} << 20;
// Lengths and counts (maxLength, maxItems, ...): large ones cost O(log) rules (SchemaConverter::repeated).
constexpr int64_t kMaxCount = int64_t{1} << 32;

// Shared JSON building blocks; a rule is emitted only when used.
const std::vector<std::pair<std::string, std::string>> kPrimitives = {
    // At most one whitespace character between tokens (vLLM's disable_any_whitespace, xgrammar's compact JSON): a
    // model that favours whitespace (a random one does) cannot stall an output in it forever, and every extra
    // whitespace byte would be an automaton node of its own.
    {"ws", R"([ \t\n]?)"},
    // Raw characters except '"', '\' and controls; escapes except lone surrogates (\uD800-\uDFFF), which would make
    // string lengths ambiguous.
    {"json-char",
     R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))"},
    {"json-string", R"("\"" json-char* "\"")"},
    {"json-integer", R"("-"? ("0" | [1-9] [0-9]{0,15}))"},
    {"json-number", R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,2})?)"},
    {"json-value", R"(json-object | json-array | json-string | json-number | "true" | "false" | "null")"},
    {"json-object",
     R"("{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}")"},
    {"json-array", R"("[" ws (json-value ws ("," ws json-value ws)*)? "]")"},
};

// The keywords that constrain values (format and OpenAPI's nullable included). Validators ignore every other key
// (annotations, $defs, vendor extensions such as "x-taplo"), and so does the converter, also where two allOf parts
// give one different values.
const std::set<std::string> kValidationKeywords = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength",
    "minLength", "pattern", "format", "items", "prefixItems", "additionalItems", "maxItems", "minItems", "uniqueItems",
    "contains", "minContains", "maxContains", "maxProperties", "minProperties", "required", "properties",
    "patternProperties", "additionalProperties", "dependentRequired", "dependencies", "dependentSchemas",
    "propertyNames", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "nullable",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

// allOf keeps the tightest of these bounds.
const std::set<std::string> kLowerBounds = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"};
const std::set<std::string> kUpperBounds = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"};
// Keywords whose value is one subschema; allOf combines two of them into an allOf of both.
const std::set<std::string> kSubschemaKeywords = {"items", "additionalItems", "additionalProperties", "propertyNames", "contains"};

const std::set<std::string> kUnsupported = {
    "propertyNames", "contains", "minContains", "maxContains",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

// The type a schema without "type" is generated as, from the keywords that only constrain that type (a value of
// another type would ignore them, but then any value would do, and the keywords say what was meant).
std::optional<std::string> inferred_type(const nlohmann::ordered_json& schema) {
  auto has_any = [&](std::initializer_list<const char*> keys) {
    return std::any_of(keys.begin(), keys.end(), [&](const char* key) { return schema.contains(key); });
  };
  if (has_any({"properties", "additionalProperties", "required", "patternProperties", "minProperties", "maxProperties",
               "dependentRequired", "dependentSchemas", "dependencies"})) {
    return "object";
  }
  if (has_any({"items", "prefixItems", "minItems", "maxItems", "uniqueItems"})) return "array";
  if (has_any({"pattern", "minLength", "maxLength"})) return "string";
  if (has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) return "number";
  return std::nullopt;
}

// An EBNF "..." literal for arbitrary UTF-8 text.
std::string ebnf_literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    auto b = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (b < 0x20) {
      out += fmt::format("\\x{:02X}", b);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string ebnf_class_char(uint32_t cp) {
  if (cp == ']' || cp == '\\' || cp == '-' || cp == '^') return std::string("\\") + static_cast<char>(cp);
  if (cp < 0x20 || cp > 0x7E) return cp <= 0xFFFF ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
  return std::string(1, static_cast<char>(cp));
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
    for (size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string choice(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

std::string repeat_suffix(uint64_t lo, std::optional<uint64_t> hi) {
  if (!hi) return lo == 0 ? "*" : lo == 1 ? "+" : fmt::format("{{{},}}", lo);
  if (lo == 0 && *hi == 1) return "?";
  return fmt::format("{{{},{}}}", lo, *hi);
}

// A schema shown to admit no value. Where a value may be left out (an optional property, an anyOf or oneOf branch,
// additional properties or items) the converter leaves it out instead of refusing the schema.
class MatchesNothing : public Error {
 public:
  using Error::Error;
};

class SchemaConverter {
 public:
  explicit SchemaConverter(const json& root)
      : root_(root), refs_hide_siblings_(refs_hide_siblings(root)), validator_(root, refs_hide_siblings_) {}

  std::string convert() {
    std::string root_body = visit(root_, "");
    count_step();  // a budget error that a fallback caught still refuses the schema
    count_grammar_bytes(root_body.size(), "");
    std::string out = "root ::= " + root_body + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& path, const std::string& message) const {
    fail("invalid JSON schema at '{}': {}", path.empty() ? "/" : path, message);
  }

  [[noreturn]] void matches_nothing(const std::string& path, const std::string& message) const {
    throw MatchesNothing(fmt::format("invalid JSON schema at '{}': {}", path.empty() ? "/" : path, message));
  }

  // The rules written since a checkpoint are dropped when the schema part that wrote them turns out to match
  // nothing, with the names and shared bodies they registered (a later part must not refer to a rule that is gone).
  struct Checkpoint {
    size_t num_rules;
    size_t journal_size;
  };
  Checkpoint checkpoint() const { return {rules_.size(), journal_.size()}; }
  void roll_back(const Checkpoint& to) {
    rules_.resize(to.num_rules);
    while (journal_.size() > to.journal_size) {
      auto& [kind, key] = journal_.back();
      if (kind == Registered::kName) defined_.erase(key);
      if (kind == Registered::kBody) rule_by_body_.erase(key);
      if (kind == Registered::kRef) ref_rules_.erase(key);
      journal_.pop_back();
    }
  }
  // visit(), or nullopt where the schema matches nothing.
  std::optional<std::string> visit_unless_empty(const json& schema, const std::string& path) {
    Checkpoint before = checkpoint();
    try {
      return visit(schema, path);
    } catch (const MatchesNothing&) {
      roll_back(before);
      return std::nullopt;
    }
  }

  // Sticky: past the budget every later step fails too, so a caller that catches the error and tries another way
  // cannot start the expansion over.
  void count_step(size_t num_steps = 1) {
    num_steps_ += num_steps;
    if (num_steps_ <= kMaxConversionSteps) return;
    fail("invalid JSON schema: converting it takes more than {} steps (it is that large, or it refers to itself more "
         "than once per level, as an allOf, anyOf or oneOf of two $refs to itself does)", kMaxConversionSteps);
  }

  static size_t num_json_values(const json& value) {
    size_t n = 1;
    if (value.is_structured()) {
      for (const auto& item : value) n += num_json_values(item);
    }
    return n;
  }

  void count_grammar_bytes(size_t num_bytes, const std::string& path) {
    grammar_bytes_ += num_bytes;
    if (grammar_bytes_ > kMaxGrammarBytes) {
      error(path, fmt::format("the schema's grammar would exceed {} MiB", kMaxGrammarBytes >> 20));
    }
  }

  std::string primitive(const std::string& name) {
    if (defined_.count(name)) return name;
    for (const auto& [primitive_name, body] : kPrimitives) {
      if (primitive_name != name) continue;
      defined_.insert(name);
      journal_.push_back({Registered::kName, name});
      rules_.push_back({name, body});
      // Pull in the primitives this one refers to.
      for (const auto& [other, unused] : kPrimitives) {
        if (other != name && body.find(other) != std::string::npos) primitive(other);
      }
      return name;
    }
    fail("internal: unknown JSON primitive '{}'", name);
  }

  std::string fresh_name(const std::string& hint) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty() || !std::isalpha(static_cast<unsigned char>(base[0]))) base = "r-" + base;
    std::string name = base;
    for (int k = 2; defined_.count(name) || name == "root"; ++k) name = fmt::format("{}-{}", base, k);
    defined_.insert(name);
    journal_.push_back({Registered::kName, name});
    return name;
  }

  // A named rule for a body, shared by identical bodies.
  std::string rule(const std::string& hint, const std::string& body) {
    auto it = rule_by_body_.find(body);
    if (it != rule_by_body_.end()) return it->second;
    count_grammar_bytes(body.size(), "");
    std::string name = fresh_name(hint);
    rules_.push_back({name, body});
    rule_by_body_.emplace(body, name);
    journal_.push_back({Registered::kBody, body});
    return name;
  }

  // The JSON pointer of a "#..." reference: a URI fragment, so percent-encoded ("#/patternProperties/%5Ba-z%5D").
  static json::json_pointer fragment_pointer(const std::string& ref) {
    std::string pointer;
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
        pointer += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        pointer += ref[i];
      }
    }
    return json::json_pointer(pointer);
  }

  const json& resolve_pointer(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') error(path, fmt::format("only local $ref (\"#...\") is supported, got '{}'", ref));
    try {
      return root_.at(fragment_pointer(ref));
    } catch (const json::exception& e) {
      error(path, fmt::format("$ref '{}' does not resolve: {}", ref, e.what()));
    }
  }

  std::string visit_ref(const std::string& ref, const std::string& path) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    const json& target = resolve_pointer(ref, path);
    std::string hint = ref.substr(ref.find_last_of('/') + 1);
    std::string name = fresh_name(hint.empty() ? "ref" : hint);
    ref_rules_.emplace(ref, name);  // before visiting: the target may refer to itself
    journal_.push_back({Registered::kRef, ref});
    std::string body = visit(target, ref.substr(1));
    rules_.push_back({name, body});
    return name;
  }

  // allOf: the sub-schemas' keywords combined into one schema that admits only values every part admits: properties
  // and required united, types intersected, bounds tightened, anyOf/oneOf multiplied out, subschemas of items and
  // additionalProperties combined; parts that disagree on a keyword this cannot combine (two patterns) are an error.
  // enum/const come from one part: visit() checks each literal against every part as written.
  json merge_all_of(const json& schema, const std::string& path) {
    DepthGuard guard(*this, path);
    json merged = json::object();
    std::vector<json> closed_parts;  // parts with additionalProperties, checked against the united properties
    std::function<void(const json&, const std::string&, int)> merge_in = [&](const json& part, const std::string& part_path, int hops) {
      if (hops > kMaxNestingDepth) error(part_path, "allOf through a $ref cycle");
      if (part.is_boolean()) {
        if (!part.get<bool>()) matches_nothing(part_path, "schema 'false' matches nothing");
        return;
      }
      if (!part.is_object()) error(part_path, "allOf entries must be schema objects");
      if (part.contains("$ref")) {
        if (!part["$ref"].is_string()) error(part_path, "$ref must be a string");
        merge_in(resolve_pointer(part["$ref"].get<std::string>(), part_path), part_path, hops + 1);
        json siblings = constraining_siblings(part, "$ref");
        if (!siblings.empty() && !refs_hide_siblings_) merge_in(siblings, part_path, hops + 1);
        return;
      }
      json flat = part.contains("allOf") ? merge_all_of(part, part_path) : part;
      // nullable widens the type beside it only, not the other parts' types.
      if (flat.contains("nullable")) {
        if (flat["nullable"] == true && flat.contains("type")) flat["type"] = intersect_types(flat["type"], flat["type"], part_path, true);
        flat.erase("nullable");
      }
      if (flat.contains("additionalProperties") && flat["additionalProperties"] != true) closed_parts.push_back(flat);
      if (flat.contains("if") && merged.contains("if")) {
        // (if A then B else C) and X is (if A then B and X else C and X): a second conditional joins both sides.
        json second = json::object();
        for (const char* key : {"if", "then", "else"}) {
          if (flat.contains(key)) second[key] = flat[key];
          flat.erase(key);
        }
        merged["then"] = both(merged.value("then", json(true)), second);
        merged["else"] = both(merged.value("else", json(true)), second);
      }
      if (flat.contains("not") && merged.contains("not")) {
        merged["not"] = json{{"anyOf", json::array({merged["not"], flat["not"]})}};  // not A and not B
        flat.erase("not");
      }
      for (auto& [key, value] : flat.items()) {
        if (!kValidationKeywords.count(key)) continue;
        if (!merged.contains(key)) {
          merged[key] = value;
        } else if (key == "properties") {
          for (auto& [prop, prop_schema] : value.items()) {
            json& target = merged["properties"][prop];
            target = both(target, prop_schema);
          }
        } else if (key == "required") {
          for (const auto& name : value) {
            if (std::find(merged["required"].begin(), merged["required"].end(), name) == merged["required"].end()) {
              merged["required"].push_back(name);
            }
          }
        } else if (key == "type") {
          merged["type"] = intersect_types(merged["type"], value, part_path);
        } else if (key == "enum" || key == "const") {
          continue;
        } else if (kLowerBounds.count(key) && value.is_number() && merged[key].is_number()) {
          if (value.get<double>() > merged[key].get<double>()) merged[key] = value;
        } else if (kUpperBounds.count(key) && value.is_number() && merged[key].is_number()) {
          if (value.get<double>() < merged[key].get<double>()) merged[key] = value;
        } else if (key == "items" && value.is_array() != merged[key].is_array()) {
          error(part_path, "allOf combines tuple and list forms of 'items', which is not supported");
        } else if (kSubschemaKeywords.count(key) && !value.is_array()) {
          merged[key] = both(merged[key], value);
        } else if ((key == "anyOf" || key == "oneOf") && value.is_array() && merged[key].is_array()) {
          // (a1 | a2) & (b1 | b2) = (a1 & b1) | (a1 & b2) | ...; for oneOf too: exactly one pair matches exactly
          // when exactly one branch of each matches.
          if (value.size() * merged[key].size() > 64) error(part_path, fmt::format("allOf combines two '{}' lists of more than 64 branch pairs", key));
          json product = json::array();
          for (const auto& a : merged[key]) {
            for (const auto& b : value) product.push_back(json{{"allOf", json::array({a, b})}});
          }
          merged[key] = product;
        } else if (!json_equal(merged[key], value)) {
          error(part_path, fmt::format("allOf combines two different values of '{}', which is not supported", key));
        }
      }
    };
    json own = schema;  // the keywords beside allOf are one more part
    own.erase("allOf");
    if (!own.empty()) merge_in(own, path, 0);
    const json& parts = schema["allOf"];
    if (!parts.is_array() || parts.empty()) error(path + "/allOf", "must be a non-empty array");
    for (size_t i = 0; i < parts.size(); ++i) merge_in(parts[i], fmt::format("{}/allOf/{}", path, i), 0);
    // A part's additionalProperties governs the properties other parts declare and it does not.
    for (const auto& part : closed_parts) {
      if (part.contains("patternProperties") || !merged.contains("properties")) continue;
      const json& own = part.contains("properties") ? part["properties"] : json::object();
      json properties = json::object();
      for (auto& [name, prop_schema] : merged["properties"].items()) {
        if (own.contains(name)) {
          properties[name] = prop_schema;
        } else if (part["additionalProperties"] != false) {
          properties[name] = json{{"allOf", json::array({prop_schema, part["additionalProperties"]})}};
        } else if (merged.contains("required") && std::find(merged["required"].begin(), merged["required"].end(), name) != merged["required"].end()) {
          const std::string message = fmt::format("allOf requires property '{}', which a part with additionalProperties false forbids", name);
          if (merged.value("type", json()) == "object") matches_nothing(path, message);  // no object has it both ways
          error(path, message);
        }
      }
      merged["properties"] = properties;
    }
    count_step(num_json_values(merged));  // a step per value the merge copied
    return merged;
  }

  // A schema for the values both admit (null: no schema yet). Equal schemas stay one: a recursive schema whose
  // parts repeat one another (a pattern property over a declared one, both with the same items) would otherwise
  // double at every level it is expanded.
  static json both(const json& a, const json& b) {
    if (a.is_null() || json_equal(a, b)) return b;
    return json{{"allOf", json::array({a, b})}};
  }

  // The types both allow (with_null: and "null").
  json intersect_types(const json& a, const json& b, const std::string& path, bool with_null = false) {
    auto names = [&](const json& t) {
      std::set<std::string> out;
      for (const auto& n : t.is_array() ? t : json::array({t})) {
        if (!n.is_string()) error(path + "/type", "must be a string or an array of strings");
        out.insert(n.get<std::string>());
      }
      return out;
    };
    std::set<std::string> x = names(a), y = names(b);
    if (with_null) x.insert("null"), y.insert("null");
    json common = json::array();
    for (const auto& t : x) {
      if (y.count(t) || (t == "integer" && y.count("number"))) common.push_back(t);
      else if (t == "number" && y.count("integer")) common.push_back("integer");
    }
    if (common.empty()) matches_nothing(path, fmt::format("allOf combines incompatible types {} and {}", a.dump(), b.dump()));
    return common.size() == 1 ? common[0] : common;
  }

  // Bounds recursion through nesting, allOf and $ref chains (a cycle of allOf through $ref never ends otherwise)
  // and the letters of a property name that key_excluding spells out.
  struct DepthGuard {
    explicit DepthGuard(SchemaConverter& c, const std::string& path) : converter(c) {
      converter.count_step();
      if (converter.depth_ >= kMaxNestingDepth) {
        converter.error(path, fmt::format("schema {} (or an allOf/$ref cycle)", nesting_limit_message()));
      }
      ++converter.depth_;
    }
    ~DepthGuard() { --converter.depth_; }
    SchemaConverter& converter;
  };

  std::string visit(const json& schema, const std::string& path) {
    DepthGuard guard(*this, path);
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) matches_nothing(path, "schema 'false' matches nothing");
      return primitive("json-value");
    }
    if (!schema.is_object()) error(path, "a schema must be an object or a boolean");
    if (schema.contains("enum") || schema.contains("const")) return literals(schema, schema, path);
    if (schema.contains("not")) return negation(schema, path);
    for (auto& [key, value] : schema.items()) {
      if (kUnsupported.count(key)) error(path, fmt::format("keyword '{}' is not supported", key));
    }
    if (schema.contains("nullable")) {
      // OpenAPI's nullable adds "null" to the type beside it (as ajv reads it; ajv refuses it without a type).
      json rest = schema;
      rest.erase("nullable");
      if (schema["nullable"] == true && rest.contains("type")) rest["type"] = intersect_types(rest["type"], rest["type"], path, true);
      return visit(rest, path);
    }
    if (schema.contains("allOf")) {
      json merged = merge_all_of(schema, path);
      // Literals from one part are checked against the parts as written, not against their approximate merge.
      if (merged.contains("enum") || merged.contains("const")) return literals(merged, schema, path);
      return visit(merged, path);
    }
    if (schema.contains("$ref")) {
      if (!schema["$ref"].is_string()) error(path + "/$ref", "must be a string");
      std::string ref = schema["$ref"].get<std::string>();
      json siblings = constraining_siblings(schema, "$ref");
      // Since draft 2019-09 the keywords beside $ref apply too (before it they were ignored).
      if (siblings.empty() || refs_hide_siblings_) return visit_ref(ref, path);
      return visit(json{{"allOf", json::array({json{{"$ref", ref}}, siblings})}}, path);
    }
    if (schema.contains("if")) return conditional(schema, path);
    if (schema.contains("anyOf")) {
      std::vector<std::string> alternatives;
      std::vector<json> branches = branches_with_siblings(schema, "anyOf", path);
      for (size_t i = 0; i < branches.size(); ++i) {
        if (auto branch = visit_unless_empty(branches[i], fmt::format("{}/anyOf/{}", path, i))) alternatives.push_back(*branch);
      }
      if (alternatives.empty()) matches_nothing(path + "/anyOf", "no branch matches a value");
      return choice(alternatives);
    }
    if (schema.contains("oneOf")) return one_of(schema, path);

    json type = schema.contains("type") ? schema["type"] : json();
    if (type.is_null()) {
      std::optional<std::string> inferred = inferred_type(schema);
      if (!inferred) return primitive("json-value");
      type = *inferred;
    }
    if (type.is_array()) {
      if (type.empty()) error(path + "/type", "must not be empty");
      std::vector<std::string> alternatives;
      for (const auto& t : type) {
        json single = schema;
        single["type"] = t;
        alternatives.push_back(visit(single, path));
      }
      return choice(alternatives);
    }
    if (!type.is_string()) error(path + "/type", "must be a string or an array of strings");
    std::string t = type.get<std::string>();
    if (t == "null") return "\"null\"";
    if (t == "boolean") return "(\"true\" | \"false\")";
    if (t == "integer") return integer(schema, path);
    if (t == "number") return number(schema, path);
    if (t == "string") return string(schema, path);
    if (t == "array") return array(schema, path);
    if (t == "object") return object(schema, path);
    error(path + "/type", fmt::format("unknown type '{}'", t));
  }

  // The keywords beside `keyword` that constrain values (nullable widens them, so it counts).
  json constraining_siblings(const json& schema, const char* keyword) const {
    json siblings = json::object();
    for (auto& [k, v] : schema.items()) {
      if (k != keyword && kValidationKeywords.count(k)) siblings[k] = v;
    }
    return siblings;
  }

  // anyOf/oneOf branches, each combined with the keywords beside the anyOf/oneOf (which apply to every branch).
  std::vector<json> branches_with_siblings(const json& schema, const char* keyword, const std::string& path) {
    const json& branches = schema[keyword];
    if (!branches.is_array() || branches.empty()) error(path + "/" + keyword, "must be a non-empty array");
    json siblings = constraining_siblings(schema, keyword);
    std::vector<json> out;
    for (const auto& branch : branches) {
      out.push_back(siblings.empty() ? branch : json{{"allOf", json::array({siblings, branch})}});
    }
    return out;
  }

  Verdict check(const json& value, const json& schema, const std::string& path) {
    try {
      return validator_.check(value, schema);
    } catch (const Error& e) {
      error(path, e.what());
    }
  }

  // The enum/const values of `listed_in` that `schema` admits: each literal is checked against every keyword of the
  // schema (siblings, allOf parts, $ref targets), so the grammar generates the intersection.
  std::vector<json> admitted_literals(const json& listed_in, const json& schema, const std::string& path, size_t* num_undecided) {
    std::vector<json> candidates;
    if (listed_in.contains("const")) {
      candidates.push_back(listed_in["const"]);
    } else {
      const json& values = listed_in["enum"];
      if (!values.is_array() || values.empty()) error(path + "/enum", "must be a non-empty array");
      candidates.assign(values.begin(), values.end());
    }
    std::vector<json> admitted;
    for (const auto& candidate : candidates) {
      Verdict v = check(candidate, schema, path);
      if (num_undecided) *num_undecided += v == Verdict::kUnknown;
      if (v == Verdict::kValid) admitted.push_back(candidate);
    }
    return admitted;
  }

  std::string literals(const json& listed_in, const json& schema, const std::string& path) {
    size_t num_undecided = 0;
    std::vector<std::string> alternatives;
    std::set<std::string> seen;
    for (const auto& value : admitted_literals(listed_in, schema, path, &num_undecided)) {
      std::string literal = ebnf_literal(value.dump());
      if (seen.insert(literal).second) alternatives.push_back(literal);
    }
    if (alternatives.empty() && num_undecided == 0) {
      matches_nothing(path, "no value of 'enum'/'const' satisfies the other keywords of the schema");
    }
    if (alternatives.empty()) {
      error(path, "no value of 'enum'/'const' is known to satisfy the other keywords of the schema (formats and "
                        "anchored patterns are checked as the subsets the structured-output docs describe)");
    }
    return choice(alternatives);
  }

  // The schema with $ref chains followed and allOf merged: the keywords that hold at its top level. nullopt where
  // that is not known (a merge this converter refuses, a $ref cycle).
  std::optional<json> resolved(json schema, const std::string& path) {
    try {
      for (int hops = 0; schema.is_object() && hops < kMaxNestingDepth; ++hops) {
        if (schema.contains("allOf")) {
          schema = merge_all_of(schema, path);
        } else if (schema.contains("$ref") && schema["$ref"].is_string()) {
          json siblings = constraining_siblings(schema, "$ref");
          const json& target = resolve_pointer(schema["$ref"].get<std::string>(), path);
          if (siblings.empty() || refs_hide_siblings_) {
            schema = target;
          } else {
            schema = json{{"allOf", json::array({target, siblings})}};
          }
        } else {
          return schema;
        }
      }
      return schema.is_boolean() ? std::optional<json>(schema) : std::nullopt;
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  // Kinds of JSON values, as bits: integral and fractional numbers apart, since "integer" is a subset of "number".
  enum Kind : uint8_t { kNull = 1, kBoolean = 2, kObject = 4, kArray = 8, kString = 16, kIntegral = 32, kFractional = 64, kAnyKind = 127 };

  static uint8_t kind_of(const json& value) {
    if (value.is_null()) return kNull;
    if (value.is_boolean()) return kBoolean;
    if (value.is_object()) return kObject;
    if (value.is_array()) return kArray;
    if (value.is_string()) return kString;
    double v = value.get<double>();
    return value.is_number_integer() || v == std::trunc(v) ? kIntegral : kFractional;
  }

  static uint8_t kinds_of_type(const json& type) {
    auto one = [](const json& t) -> uint8_t {
      if (!t.is_string()) return kAnyKind;
      std::string name = t.get<std::string>();
      if (name == "null") return kNull;
      if (name == "boolean") return kBoolean;
      if (name == "object") return kObject;
      if (name == "array") return kArray;
      if (name == "string") return kString;
      if (name == "integer") return kIntegral;
      if (name == "number") return kIntegral | kFractional;
      return kAnyKind;
    };
    if (!type.is_array()) return one(type);
    uint8_t kinds = 0;
    for (const auto& t : type) kinds |= one(t);
    return kinds;
  }

  // The kinds of values a schema accepts (a superset when unsure).
  uint8_t accepted_kinds(const json& schema, int depth) {
    count_step();
    if (schema.is_boolean()) return schema.get<bool>() ? kAnyKind : 0;
    if (!schema.is_object() || depth > 64) return kAnyKind;
    uint8_t kinds = kAnyKind;
    if (schema.contains("type")) {
      kinds &= kinds_of_type(schema["type"]) | (schema.value("nullable", false) == true ? kNull : 0);
    }
    if (schema.contains("const")) kinds &= kind_of(schema["const"]);
    if (schema.contains("enum") && schema["enum"].is_array()) {
      uint8_t listed = 0;
      for (const auto& v : schema["enum"]) listed |= kind_of(v);
      kinds &= listed;
    }
    if (schema.contains("$ref") && schema["$ref"].is_string()) {
      const std::string ref = schema["$ref"].get<std::string>();
      if (!ref.empty() && ref[0] == '#') {
        const json* target = nullptr;
        try {
          target = &root_.at(fragment_pointer(ref));
        } catch (const json::exception&) {
        }
        if (target) kinds &= accepted_kinds(*target, depth + 1);
      }
    }
    if (schema.contains("allOf") && schema["allOf"].is_array()) {
      for (const auto& part : schema["allOf"]) kinds &= accepted_kinds(part, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key) || !schema[key].is_array()) continue;
      uint8_t any = 0;
      for (const auto& branch : schema[key]) any |= accepted_kinds(branch, depth + 1);
      kinds &= any;
    }
    return kinds;
  }

  // The kinds of values the grammar for a schema generates: those it accepts, narrowed as visit() narrows a schema
  // without a type (properties make it an object, and so on).
  uint8_t generated_kinds(const json& schema, const std::string& path) {
    std::optional<json> r = resolved(schema, path);
    if (!r) return accepted_kinds(schema, 0);
    uint8_t kinds = accepted_kinds(*r, 0);
    if (r->is_object() && !r->contains("type") && !r->contains("enum") && !r->contains("const") &&
        !r->contains("anyOf") && !r->contains("oneOf")) {
      if (std::optional<std::string> type = inferred_type(*r)) kinds &= kinds_of_type(*type);
    }
    return kinds;
  }

  // The closed interval a schema's top-level bounds allow (for "count" keywords such as minLength, or for values).
  struct Interval {
    double lo = -INFINITY, hi = INFINITY;
    bool lo_open = false, hi_open = false;
  };
  static Interval value_interval(const json& schema) {
    Interval interval;
    auto number = [&](const char* key) -> std::optional<double> {
      if (!schema.contains(key) || !schema[key].is_number()) return std::nullopt;
      return schema[key].get<double>();
    };
    if (auto v = number("minimum")) interval = {*v, interval.hi, schema.value("exclusiveMinimum", json()) == true, false};
    if (auto v = number("maximum")) {
      interval.hi = *v;
      interval.hi_open = schema.value("exclusiveMaximum", json()) == true;
    }
    if (auto v = number("exclusiveMinimum"); v && *v >= interval.lo) interval.lo = *v, interval.lo_open = true;
    if (auto v = number("exclusiveMaximum"); v && *v <= interval.hi) interval.hi = *v, interval.hi_open = true;
    return interval;
  }
  static Interval count_interval(const json& schema, const char* min_key, const char* max_key) {
    Interval interval{0, INFINITY};
    if (schema.contains(min_key) && schema[min_key].is_number()) interval.lo = schema[min_key].get<double>();
    if (schema.contains(max_key) && schema[max_key].is_number()) interval.hi = schema[max_key].get<double>();
    return interval;
  }
  static bool disjoint(const Interval& a, const Interval& b) {
    if (a.hi < b.lo || b.hi < a.lo) return true;
    return (a.hi == b.lo && (a.hi_open || b.lo_open)) || (b.hi == a.lo && (b.hi_open || a.lo_open));
  }

  // Whether every value the grammar for `generated` produces is invalid under `other` (so the two never both match).
  // `fractional` narrows `generated`'s numbers to non-integers. False when that cannot be shown.
  bool excludes(const json& generated, const json& other, bool fractional, const std::string& path, int depth) {
    if (depth > 16) return false;
    std::optional<json> g = resolved(generated, path);
    std::optional<json> o = resolved(other, path);
    if (!g || !o) return false;
    if (g->is_object() && (g->contains("enum") || g->contains("const"))) {
      for (const auto& value : admitted_literals(*g, generated, path, nullptr)) {
        if (check(value, other, path) != Verdict::kInvalid) return false;
      }
      return true;
    }
    uint8_t kinds = generated_kinds(generated, path);
    if (fractional) kinds = (kinds & ~kIntegral) | (kinds & kIntegral ? kFractional : 0);
    uint8_t common = kinds & accepted_kinds(other, 0);
    if (common == 0) return true;
    if (!g->is_object() || !o->is_object()) return false;
    if ((common & ~(kIntegral | kFractional)) == 0) return disjoint(value_interval(*g), value_interval(*o));
    if (common == kString) {
      if (disjoint(count_interval(*g, "minLength", "maxLength"), count_interval(*o, "minLength", "maxLength"))) return true;
      // The grammar writes whole matches of a pattern: none is found by a pattern that cannot occur in them.
      if (!g->contains("pattern") || !o->contains("pattern") || !(*g)["pattern"].is_string() || !(*o)["pattern"].is_string()) return false;
      try {
        return !pattern_matches_may_contain((*g)["pattern"].get<std::string>(), (*o)["pattern"].get<std::string>());
      } catch (const Error&) {
        return false;  // a pattern the regex front end refuses is reported where it is generated
      }
    }
    if (common == kArray) return disjoint(count_interval(*g, "minItems", "maxItems"), count_interval(*o, "minItems", "maxItems"));
    if (common == kObject) return objects_exclude(*g, *o, path, depth);
    return false;
  }

  // Objects: `other` requires a key the grammar for `generated` never writes, or a key `generated` always writes has
  // a value `other` rejects (a discriminator: {"kind": {"const": "a"}} against {"kind": {"const": "b"}}).
  bool objects_exclude(const json& generated, const json& other, const std::string& path, int depth) {
    const json no_properties = json::object();
    const json& g_properties = generated.contains("properties") ? generated["properties"] : no_properties;
    const json& o_properties = other.contains("properties") ? other["properties"] : no_properties;
    auto names = [](const json& schema, const char* key) {
      std::set<std::string> out;
      if (schema.contains(key) && schema[key].is_array()) {
        for (const auto& n : schema[key]) {
          if (n.is_string()) out.insert(n.get<std::string>());
        }
      }
      return out;
    };
    std::set<std::string> g_required = names(generated, "required");
    bool g_writes_extra_keys = generated.contains("additionalProperties") && generated["additionalProperties"] != false;
    auto never_written = [&](const std::string& name) {
      if (g_required.count(name) || !g_properties.is_object()) return false;
      // Additional keys exclude the declared names, so a declared property that matches nothing is never written.
      if (g_properties.contains(name)) return plainly_false(g_properties[name]);
      return !g_writes_extra_keys;
    };
    for (const auto& name : names(other, "required")) {
      if (never_written(name)) return true;
    }
    bool o_closed = other.contains("additionalProperties") && other["additionalProperties"] == false && !other.contains("patternProperties");
    for (const auto& name : g_required) {
      if (!g_properties.is_object() || !o_properties.is_object()) return false;
      if (o_properties.contains(name)) {
        if (g_properties.contains(name) && excludes(g_properties[name], o_properties[name], false, path, depth + 1)) return true;
      } else if (o_closed) {
        return true;
      }
    }
    return false;
  }

  // oneOf: exactly one branch must match. A branch is generated only where no other branch can match its values: a
  // number branch beside integer branches is narrowed to non-integers, an integer branch inside a number branch is
  // dropped, an object branch is narrowed so that the other branch rejects it (object_excluding), and a branch that
  // still overlaps another is left out (it would need the complement of that branch). The schema is refused when no
  // branch is left.
  std::string one_of(const json& schema, const std::string& path) {
    std::vector<json> branches = branches_with_siblings(schema, "oneOf", path);
    std::vector<std::string> alternatives;
    std::string overlap;
    for (size_t a = 0; a < branches.size(); ++a) {
      json generated = branches[a];
      bool fractional = false;
      bool dropped = false;
      for (size_t b = 0; b < branches.size() && !dropped; ++b) {
        if (b == a || excludes(generated, branches[b], fractional, path, 0)) continue;
        std::optional<json> r = resolved(generated, path);
        bool plain_number = r && r->is_object() && r->value("type", json()) == "number" && !r->contains("anyOf") && !r->contains("oneOf");
        if (plain_number && !fractional && excludes(generated, branches[b], true, path, 0)) {
          fractional = true;
        } else if (generated_kinds(generated, path) == kIntegral && (accepted_kinds(branches[b], 0) & kFractional)) {
          dropped = true;
        } else if (std::optional<json> narrowed = object_excluding(generated, branches[b], path)) {
          generated = std::move(*narrowed);
        } else {
          dropped = true;
          if (overlap.empty()) overlap = fmt::format("branches {} and {} can match the same value", a, b);
        }
      }
      if (dropped) continue;
      std::string branch_path = fmt::format("{}/oneOf/{}", path, a);
      if (fractional) {
        alternatives.push_back(fractional_number(*resolved(generated, path), branch_path));
      } else if (auto branch = visit_unless_empty(generated, branch_path)) {
        alternatives.push_back(*branch);
      }
    }
    if (alternatives.empty() && overlap.empty()) matches_nothing(path + "/oneOf", "no value matches exactly one branch");
    if (alternatives.empty()) {
      error(path + "/oneOf", overlap + ", and oneOf allows exactly one match: make them exclude each other (different "
                             "types, disjoint ranges, a required property with different 'const' values) or use anyOf");
    }
    return choice(alternatives);
  }

  // `generated` narrowed to objects that `other` rejects, where one more keyword does it: leaving out a key that
  // `other` requires, requiring a declared property whose values `other`'s rejects, or keeping the listed values of
  // a property that `other` rejects (a discriminator). nullopt where none works.
  std::optional<json> object_excluding(const json& generated, const json& other, const std::string& path) {
    if (generated_kinds(generated, path) != kObject) return std::nullopt;
    std::optional<json> g = resolved(generated, path);
    std::optional<json> o = resolved(other, path);
    if (!g || !o || !g->is_object() || !o->is_object()) return std::nullopt;
    const std::set<std::string> g_required = required_names(*g);
    for (const auto& name : required_names(*o)) {
      if (g_required.count(name)) continue;
      json narrowed = json{{"allOf", json::array({generated, json{{"properties", json{{name, false}}}}})}};
      if (excludes(narrowed, other, false, path, 0)) return narrowed;
    }
    if (!g->contains("properties") || !(*g)["properties"].is_object() || !o->contains("properties") || !(*o)["properties"].is_object()) {
      return std::nullopt;
    }
    for (auto& [name, property] : (*g)["properties"].items()) {
      if (!(*o)["properties"].contains(name)) continue;
      const json& rejected_by = (*o)["properties"][name];
      json narrowed;
      if (excludes(property, rejected_by, false, path, 0)) {
        if (g_required.count(name)) continue;  // then the key already decides, and excludes() saw it
        narrowed = json{{"allOf", json::array({generated, json{{"required", json::array({name})}}})}};
      } else if (std::optional<json> p = resolved(property, path); p && p->is_object() && (p->contains("enum") || p->contains("const"))) {
        // A discriminator: keep the listed values the other branch rejects.
        json kept = json::array();
        for (const auto& value : admitted_literals(*p, property, path, nullptr)) {
          if (check(value, rejected_by, path) == Verdict::kInvalid) kept.push_back(value);
        }
        if (kept.empty()) continue;
        narrowed = json{{"allOf", json::array({generated, json{{"properties", json{{name, json{{"enum", kept}}}}},
                                                                {"required", json::array({name})}}})}};
      } else {
        continue;
      }
      if (excludes(narrowed, other, false, path, 0)) return narrowed;
    }
    return std::nullopt;
  }

  static std::set<std::string> required_names(const json& schema) {
    std::set<std::string> out;
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const auto& n : schema["required"]) {
        if (n.is_string()) out.insert(n.get<std::string>());
      }
    }
    return out;
  }

  // Whether a schema is false as written (directly or as a part of its allOf): one that narrowing wrote.
  static bool plainly_false(const json& schema) {
    if (schema.is_boolean()) return !schema.get<bool>();
    if (!schema.is_object() || !schema.contains("allOf") || !schema["allOf"].is_array()) return false;
    return std::any_of(schema["allOf"].begin(), schema["allOf"].end(), [](const json& part) { return plainly_false(part); });
  }

  // not: the rest of the schema, where its values provably fail the negated schema; where the negated schema
  // requires an object key the rest does not, objects of the rest without that key. Refused otherwise.
  std::string negation(const json& schema, const std::string& path) {
    json rest = schema;
    rest.erase("not");
    const json& negated = schema["not"];
    if (negated.is_boolean() || (negated.is_object() && constraining_siblings(negated, "").empty())) {
      if (negated != false) matches_nothing(path + "/not", "'not' of a schema that matches everything matches nothing");
      return visit(rest, path);
    }
    if (excludes(rest, negated, false, path, 0)) return visit(rest, path);
    if (std::optional<json> n = resolved(negated, path); n && n->is_object()) {
      std::optional<json> r = resolved(rest, path);
      const std::set<std::string> rest_required = r && r->is_object() ? required_names(*r) : std::set<std::string>();
      for (const auto& name : required_names(*n)) {
        if (rest_required.count(name)) continue;
        return visit(json{{"allOf", json::array({rest, json{{"type", "object"}, {"properties", json{{name, false}}}}})}}, path);
      }
    }
    error(path + "/not", "'not' is supported where the rest of the schema excludes its values (another type, disjoint "
                         "ranges or lengths) or where it requires an object key the rest of the schema leaves out");
  }

  // Numbers that are not integers (a oneOf beside an integer branch). Integer parts of at most 8 digits and fractions
  // of at most 7 ending in a non-zero digit: at most 15 significant digits, so the double a validator parses is not
  // an integer either.
  std::string fractional_number(const json& schema, const std::string& path) {
    std::optional<int64_t> lo, hi;
    integer_bounds(schema, path, lo, hi);
    constexpr int64_t kMaxIntegerPart = 99'999'999;
    int64_t low = std::max(lo.value_or(-kMaxIntegerPart), -kMaxIntegerPart);
    int64_t high = std::min(hi.value_or(kMaxIntegerPart), kMaxIntegerPart);
    const std::string fraction = " \".\" [0-9]{0,6} [1-9]";
    std::vector<std::string> alternatives;
    // I.F lies strictly between I and I + 1; -I.F strictly between -(I + 1) and -I.
    if (std::max<int64_t>(low, 0) <= high - 1) alternatives.push_back(unsigned_range_ebnf(std::max<int64_t>(low, 0), high - 1) + fraction);
    if (std::max<int64_t>(0, -high) <= -low - 1) {
      alternatives.push_back("\"-\" " + unsigned_range_ebnf(std::max<int64_t>(0, -high), -low - 1) + fraction);
    }
    if (alternatives.empty()) error(path, "no number that is not an integer lies within the bounds (rounded to integers)");
    return rule("fraction", choice(alternatives));
  }

  // Bounds as the inclusive integer range they allow; exclusive and fractional bounds are rounded inwards.
  void integer_bounds(const json& schema, const std::string& path, std::optional<int64_t>& lo, std::optional<int64_t>& hi) {
    auto number_at = [&](const char* key) {
      if (!schema[key].is_number()) error(path + "/" + key, "must be a number");
      double v = schema[key].get<double>();
      return std::clamp(v, -1e17, 1e17);
    };
    // Draft 4 spells exclusive bounds as booleans beside minimum/maximum.
    bool exclusive_min_flag = schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_boolean() && schema["exclusiveMinimum"].get<bool>();
    bool exclusive_max_flag = schema.contains("exclusiveMaximum") && schema["exclusiveMaximum"].is_boolean() && schema["exclusiveMaximum"].get<bool>();
    auto tighten_lo = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    auto tighten_hi = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    if (schema.contains("minimum")) {
      double v = number_at("minimum");
      tighten_lo(exclusive_min_flag ? static_cast<int64_t>(std::floor(v)) + 1 : static_cast<int64_t>(std::ceil(v)));
    }
    if (schema.contains("maximum")) {
      double v = number_at("maximum");
      tighten_hi(exclusive_max_flag ? static_cast<int64_t>(std::ceil(v)) - 1 : static_cast<int64_t>(std::floor(v)));
    }
    if (schema.contains("exclusiveMinimum") && !schema["exclusiveMinimum"].is_boolean()) {
      tighten_lo(static_cast<int64_t>(std::floor(number_at("exclusiveMinimum"))) + 1);
    }
    if (schema.contains("exclusiveMaximum") && !schema["exclusiveMaximum"].is_boolean()) {
      tighten_hi(static_cast<int64_t>(std::ceil(number_at("exclusiveMaximum"))) - 1);
    }
    if (schema.contains("format") && schema["format"].is_string()) {
      if (auto range = integer_format_range(schema["format"].get<std::string>())) {
        tighten_lo(range->lo);
        tighten_hi(range->hi);
      }
    }
  }

  std::string integer(const json& schema, const std::string& path) {
    if (schema.contains("multipleOf")) return multiple_of(schema, path, true);
    std::optional<int64_t> lo, hi;
    integer_bounds(schema, path, lo, hi);
    if (!lo && !hi) return primitive("json-integer");
    try {
      return rule("integer", integer_range_ebnf(lo, hi));
    } catch (const Error& e) {
      error(path, e.what());
    }
  }

  std::string number(const json& schema, const std::string& path) {
    // int32/int64 make a number an integer.
    if (schema.contains("format") && schema["format"].is_string() && integer_format_range(schema["format"].get<std::string>())) {
      return integer(schema, path);
    }
    if (schema.contains("multipleOf")) return multiple_of(schema, path, false);
    std::optional<int64_t> lo, hi;
    integer_bounds(schema, path, lo, hi);
    if (!lo && !hi) return primitive("json-number");
    const auto max_magnitude = static_cast<double>(kMaxJsonIntegerMagnitude);
    int64_t low = lo ? std::max(*lo, -kMaxJsonIntegerMagnitude) : -kMaxJsonIntegerMagnitude;
    int64_t high = hi ? std::min(*hi, kMaxJsonIntegerMagnitude) : kMaxJsonIntegerMagnitude;
    std::vector<std::string> alternatives;
    if (low <= high) alternatives.push_back(integer_range_ebnf(low, high));
    // I.F with a fraction ending in a non-zero digit lies strictly between I and I + 1 (-I.F between -(I + 1) and
    // -I), so it is valid where I and I + 1 are within the bounds, exclusive or not: (0, 1) holds 0.5.
    const Interval bounds = value_interval(schema);
    auto whole_part = [&](double v) { return static_cast<int64_t>(std::clamp(v, -max_magnitude, max_magnitude)); };
    int64_t positive_lo = std::max<int64_t>(0, whole_part(std::ceil(bounds.lo)));
    int64_t positive_hi = whole_part(std::floor(bounds.hi)) - 1;
    int64_t negative_lo = std::max<int64_t>(0, whole_part(std::ceil(-bounds.hi)));
    int64_t negative_hi = whole_part(std::floor(-bounds.lo)) - 1;
    if (positive_lo <= positive_hi) {
      alternatives.push_back(unsigned_range_ebnf(positive_lo, positive_hi) + " \".\" [0-9]* [1-9]");
    }
    if (negative_lo <= negative_hi) {
      alternatives.push_back("\"-\" " + unsigned_range_ebnf(negative_lo, negative_hi) + " \".\" [0-9]* [1-9]");
    }
    if (alternatives.empty()) matches_nothing(path, fmt::format("no number lies within the bounds [{}, {}]", bounds.lo, bounds.hi));
    return rule("number", choice(alternatives));
  }

  std::optional<uint64_t> count_at(const json& schema, const char* key, const std::string& path) {
    if (!schema.contains(key)) return std::nullopt;
    const json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) error(path + "/" + key, "must be a non-negative integer");
    if (v.get<int64_t>() > kMaxCount) error(path + "/" + key, fmt::format("is too large (limit {})", kMaxCount));
    return v.get<uint64_t>();
  }

  std::string string(const json& schema, const std::string& path) {
    std::optional<uint64_t> min_len = count_at(schema, "minLength", path);
    std::optional<uint64_t> max_len = count_at(schema, "maxLength", path);
    bool has_length = min_len || max_len;
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) error(path + "/pattern", "must be a string");
      if (schema.contains("format") && schema["format"].is_string() && string_format_regex(schema["format"].get<std::string>())) {
        error(path, "'pattern' together with 'format' is not supported");
      }
      std::string pattern = schema["pattern"].get<std::string>();
      if (!has_length) return rule("pattern", "\"\\\"\" " + pattern_ebnf(pattern, path + "/pattern") + " \"\\\"\"");
      if (max_len && *max_len < min_len.value_or(0)) error(path, "maxLength is smaller than minLength");
      std::optional<Expr> bounded;
      try {
        bounded = schema_pattern_expr_with_length(pattern, min_len.value_or(0), max_len);
      } catch (const Error& e) {
        error(path + "/pattern", e.what());
      }
      if (!bounded) {
        error(path, "'pattern' together with 'minLength'/'maxLength' is supported where the parts of the pattern "
                    "that vary in length repeat something of fixed length (as in \"^[a-z]+-[0-9]*$\")");
      }
      return rule("pattern", "\"\\\"\" " + to_ebnf(*bounded) + " \"\\\"\"");
    }
    if (schema.contains("format") && schema["format"].is_string()) {
      std::string format = schema["format"].get<std::string>();
      // Formats without a regex are annotations here: any string (see json_schema_formats.h).
      if (std::optional<std::string> regex = string_format_regex(format)) {
        if (has_length) error(path, "'format' together with 'minLength'/'maxLength' is not supported");
        return rule(format, "\"\\\"\" " + regex_ebnf(*regex, path + "/format") + " \"\\\"\"");
      }
    }
    if (!has_length) return primitive("json-string");
    uint64_t lo = min_len.value_or(0);
    if (max_len && *max_len < lo) error(path, "maxLength is smaller than minLength");
    primitive("json-char");
    return rule("string", "\"\\\"\" " + repeated("json-char", lo, max_len) + " \"\\\"\"");
  }

  // item{lo,hi}. Counts up to kMaxInlineRepeat are written as they are; larger ones would make as many automaton
  // states (maxLength 65535 is common), so they are built from rules that double: power(j) is 2^j items, and
  // up_to_power(k) 0 to 2^k - 1 of them, as up_to_power(k - 1) or power(k - 1) followed by up_to_power(k - 1) (the
  // two alternatives differ in length, so a matcher keeps at most one live path per level). O(log hi) rules.
  std::string repeated(const std::string& item, uint64_t lo, std::optional<uint64_t> hi) {
    if (lo <= kMaxInlineRepeat && (!hi || *hi <= kMaxInlineRepeat)) return item + repeat_suffix(lo, hi);
    std::string rest = hi ? up_to(item, *hi - lo) : item + "*";
    return lo == 0 ? rest : exactly(item, lo) + (rest.empty() ? "" : " " + rest);
  }

  // Up to 1023 the automaton keeps one state per position, which token masks handle best (a bounded string's
  // positions share their region walks); larger counts would pass the automaton's size limits.
  static constexpr uint64_t kMaxInlineRepeat = 1023;
  static constexpr int kInlineRepeatBits = 9;  // power(9) = 512 items is the smallest power written as a rule

  std::string power(const std::string& item, int j) {
    if (j == kInlineRepeatBits) return rule("repeat", fmt::format("{}{{{}}}", item, uint64_t{1} << j));
    std::string half = power(item, j - 1);
    return rule("repeat", half + " " + half);
  }

  std::string exactly(const std::string& item, uint64_t n) {
    if (n <= kMaxInlineRepeat) return fmt::format("{}{{{}}}", item, n);
    const uint64_t below = n % (uint64_t{1} << kInlineRepeatBits);
    std::string out = below ? fmt::format("{}{{{}}}", item, below) : "";
    for (int j = kInlineRepeatBits; (n >> j) != 0; ++j) {
      if ((n >> j) & 1) out += (out.empty() ? "" : " ") + power(item, j);
    }
    return out;
  }

  std::string up_to_power(const std::string& item, int k) {
    if ((uint64_t{1} << k) - 1 <= kMaxInlineRepeat) return fmt::format("{}{{0,{}}}", item, (uint64_t{1} << k) - 1);
    std::string shorter = up_to_power(item, k - 1);
    return rule("repeat", shorter + " | " + power(item, k - 1) + " " + shorter);
  }

  // Empty for n = 0.
  std::string up_to(const std::string& item, uint64_t n) {
    if (n == 0) return "";
    if (n <= kMaxInlineRepeat) return fmt::format("{}{{0,{}}}", item, n);
    int k = 63 - __builtin_clzll(n);  // 2^k <= n < 2^(k+1)
    if (n == (uint64_t{1} << (k + 1)) - 1) return up_to_power(item, k + 1);
    return "(" + up_to_power(item, k) + " | " + power(item, k) + " " + up_to(item, n - (uint64_t{1} << k)) + ")";
  }

  std::string pattern_ebnf(const std::string& pattern, const std::string& path) {
    try {
      return to_ebnf(schema_pattern_expr(pattern, true));
    } catch (const Error& e) {
      error(path, e.what());
    }
  }

  std::string regex_ebnf(const std::string& pattern, const std::string& path) {
    try {
      return to_ebnf(parse_regex(pattern, {.json_string_escaping = true}));
    } catch (const Error& e) {
      error(path, e.what());
    }
  }

  // uniqueItems over a small domain of literals (enum/const items, booleans, null): the elements are distinct
  // values in the domain's order, as many as minItems/maxItems allow. Other item schemas would need every pair of
  // elements compared, which a grammar cannot do: there arrays of at most one element (distinct by themselves) are
  // generated where minItems allows, and the schema is refused where it does not.
  std::string unique_array(const json& schema, const std::string& path) {
    constexpr size_t kMaxDomain = 32;
    auto at_most_one_element = [&](const std::string& why) {
      if (count_at(schema, "minItems", path).value_or(0) > 1) error(path, why + " (with minItems at most 1, arrays of one element are generated)");
      json single = schema;
      single.erase("uniqueItems");
      single["maxItems"] = 1;
      return array(single, path);
    };
    if (schema.contains("prefixItems") || (schema.contains("items") && schema["items"].is_array())) {
      return at_most_one_element("'uniqueItems' together with tuple items is not supported");
    }
    json items = schema.contains("items") ? schema["items"] : json(true);
    std::vector<json> domain;
    std::optional<json> r = resolved(items, path + "/items");
    if (r && r->is_object() && (r->contains("enum") || r->contains("const"))) {
      for (auto& value : admitted_literals(*r, items, path + "/items", nullptr)) {
        bool seen = std::any_of(domain.begin(), domain.end(), [&](const json& d) { return json_equal(d, value); });
        if (!seen) domain.push_back(value);
      }
    } else if (r && r->is_object() && r->size() == 1 && r->contains("type") && kinds_of_type((*r)["type"]) == kBoolean) {
      domain = {json(false), json(true)};
    } else if (r && r->is_object() && r->size() == 1 && r->contains("type") && kinds_of_type((*r)["type"]) == kNull) {
      domain = {json(nullptr)};
    } else {
      return at_most_one_element(fmt::format("'uniqueItems' is enforced only for items that are at most {} enum/const "
                                             "values, booleans or null", kMaxDomain));
    }
    if (domain.size() > kMaxDomain) return at_most_one_element(fmt::format("'uniqueItems' over more than {} item values is not supported", kMaxDomain));
    uint64_t lo = count_at(schema, "minItems", path).value_or(0);
    uint64_t hi = std::min<uint64_t>(count_at(schema, "maxItems", path).value_or(domain.size()), domain.size());
    if (lo > hi) error(path, fmt::format("no array of distinct items has minItems {} (the items have {} values)", lo, domain.size()));
    std::string ws = primitive("ws");
    // picks(i, c): the rest of the array from domain value i on, after c values were picked.
    std::map<std::pair<size_t, uint64_t>, std::string> names;
    std::function<std::string(size_t, uint64_t)> picks = [&](size_t i, uint64_t c) -> std::string {
      if (i == domain.size()) return "\"\"";
      auto it = names.find({i, c});
      if (it != names.end()) return it->second;
      std::vector<std::string> alternatives;
      if (c < hi) {
        std::string value = ebnf_literal(domain[i].dump());
        alternatives.push_back((c > 0 ? "\",\" " + ws + " " : "") + value + " " + ws + " " + picks(i + 1, c + 1));
      }
      if (domain.size() - i - 1 >= (lo > c ? lo - c : 0)) alternatives.push_back(picks(i + 1, c));
      std::string name = rule("unique-items", choice(alternatives));
      names[{i, c}] = name;
      return name;
    };
    return rule("array", "\"[\" " + ws + " " + picks(0, 0) + " \"]\"");
  }

  // multipleOf: where the bounds leave at most kMaxMultiples values, each is listed (and checked as ajv computes it,
  // in doubles); an integer step with no bound on a side is generated digit by digit, tracking the remainder.
  std::string multiple_of(const json& schema, const std::string& path, bool integers_only) {
    constexpr int64_t kMaxMultiples = 1000;
    if (!schema["multipleOf"].is_number() || schema["multipleOf"].get<double>() <= 0) {
      error(path + "/multipleOf", "must be a number greater than 0");
    }
    double step = schema["multipleOf"].get<double>();
    bool integral_step = step == std::floor(step) && step < 1e15;
    std::optional<int64_t> lo, hi;
    integer_bounds(schema, path, lo, hi);
    if (lo && hi) {
      int64_t first = static_cast<int64_t>(std::ceil(static_cast<double>(*lo) / step));
      int64_t last = static_cast<int64_t>(std::floor(static_cast<double>(*hi) / step));
      if (last - first < kMaxMultiples) {
        std::vector<std::string> alternatives;
        for (int64_t k = first; k <= last; ++k) {
          json value = integral_step ? json(k * static_cast<int64_t>(step)) : json(static_cast<double>(k) * step);
          if (integers_only && !integral_step && value.get<double>() != std::floor(value.get<double>())) continue;
          if (check(value, schema, path) == Verdict::kValid) alternatives.push_back(ebnf_literal(value.dump()));
        }
        if (alternatives.empty()) error(path, "no multiple of 'multipleOf' lies within the bounds");
        return rule("multiple", choice(alternatives));
      }
    }
    const bool by_digits = integral_step && step <= 1000 && !(lo && hi) && !(lo && *lo > step) && !(hi && *hi < -step);
    if (!by_digits && (lo || hi)) {
      // The kMaxMultiples multiples nearest to the lower bound (or to the upper one): a subset of the valid values.
      json nearest = schema;
      if (lo) {
        nearest["maximum"] = static_cast<double>(*lo) + static_cast<double>(kMaxMultiples - 1) * step;
        nearest.erase("exclusiveMaximum");
      } else {
        nearest["minimum"] = static_cast<double>(*hi) - static_cast<double>(kMaxMultiples - 1) * step;
        nearest.erase("exclusiveMinimum");
      }
      return multiple_of(nearest, path, integers_only);
    }
    if (!integral_step || step > 1000) {
      error(path, "'multipleOf' is supported for integer steps up to 1000, or where a bound gives the multiples to list");
    }
    // Sides: a bound at or inside the first multiple away from zero keeps that side (and excludes zero if past it).
    auto m = static_cast<int64_t>(step);
    bool positive = !hi || *hi >= m;
    bool negative = !lo || *lo <= -m;
    bool zero = (!lo || *lo <= 0) && (!hi || *hi >= 0);
    // digits(r, k): the rest of a number whose digits so far leave remainder r, after k of at most 15 digits; empty
    // where no rest makes a multiple.
    std::map<std::pair<int64_t, int>, std::string> names;
    std::function<std::string(int64_t, int)> digits = [&](int64_t r, int k) -> std::string {
      auto it = names.find({r, k});
      if (it != names.end()) return it->second;
      std::vector<std::string> alternatives;
      if (r == 0) alternatives.push_back("\"\"");
      if (k < 15) {
        for (int d = 0; d <= 9; ++d) {
          std::string rest = digits((10 * r + d) % m, k + 1);
          if (!rest.empty()) alternatives.push_back(fmt::format("\"{}\" ", d) + rest);
        }
      }
      std::string name = alternatives.empty() ? "" : rule("multiple-digits", choice(alternatives));
      names[{r, k}] = name;
      return name;
    };
    std::vector<std::string> starts;
    for (int d = 1; d <= 9; ++d) {
      std::string rest = digits(d % m, 1);
      if (!rest.empty()) starts.push_back(fmt::format("\"{}\" ", d) + rest);
    }
    std::string magnitude = choice(starts);
    std::vector<std::string> alternatives;
    if (zero) alternatives.push_back("\"0\"");
    if (positive) alternatives.push_back(magnitude);
    if (negative) alternatives.push_back("\"-\" " + magnitude);
    return rule("multiple", choice(alternatives));
  }

  // if/then/else: values that satisfy "if" and "then", and values that satisfy "else" when they provably fail "if"
  // (so "else" is what applies to them).
  std::string conditional(const json& schema, const std::string& path) {
    json rest = schema;
    for (const char* key : {"if", "then", "else"}) rest.erase(key);
    json then_branch = json{{"allOf", json::array({rest, schema["if"], schema.value("then", json(true))})}};
    json else_branch = json{{"allOf", json::array({rest, schema.value("else", json(true))})}};
    std::vector<std::string> alternatives;
    std::string then_error;
    try {
      alternatives.push_back(visit(then_branch, path + "/then"));
    } catch (const Error& e) {
      then_error = e.what();
    }
    bool else_fails_if = excludes(else_branch, schema["if"], false, path, 0);
    if (!else_fails_if) {
      if (std::optional<json> narrowed = object_excluding(else_branch, schema["if"], path)) {
        else_branch = std::move(*narrowed);
        else_fails_if = true;
      }
    }
    if (else_fails_if) alternatives.push_back(visit(else_branch, path + "/else"));
    if (alternatives.empty()) {
      error(path, fmt::format("no value satisfies 'if' and 'then' ({}), and values of 'else' cannot be shown to fail 'if'", then_error));
    }
    return choice(alternatives);
  }

  // The element grammars of a tuple, up to the first element that matches nothing (an array cannot go past it):
  // false when the tuple stops there. Elements before minItems must exist, so there it is the array that matches
  // nothing.
  bool tuple_prefix(const json& elements, const char* keyword, const json& schema, const std::string& path,
                    std::vector<std::string>& prefix) {
    if (!elements.is_array()) error(path + "/" + keyword, "must be an array");
    uint64_t lo = count_at(schema, "minItems", path).value_or(0);
    for (size_t i = 0; i < elements.size(); ++i) {
      std::string element_path = fmt::format("{}/{}/{}", path, keyword, i);
      if (i < lo) {
        prefix.push_back(visit(elements[i], element_path));
      } else if (auto element = visit_unless_empty(elements[i], element_path)) {
        prefix.push_back(*element);
      } else {
        return false;
      }
    }
    return true;
  }

  std::string array(const json& schema, const std::string& path) {
    if (schema.value("uniqueItems", false) == true && count_at(schema, "maxItems", path).value_or(2) > 1) {
      return unique_array(schema, path);
    }
    std::vector<std::string> prefix;
    json items = json(true);
    if (schema.contains("prefixItems")) {
      bool open = tuple_prefix(schema["prefixItems"], "prefixItems", schema, path, prefix);
      if (!open) items = json(false);
      if (open && schema.contains("items")) items = schema["items"];
    } else if (schema.contains("items") && schema["items"].is_array()) {  // draft 4 tuples
      bool open = tuple_prefix(schema["items"], "items", schema, path, prefix);
      if (!open) items = json(false);
      if (open && schema.contains("additionalItems")) items = schema["additionalItems"];
    } else if (schema.contains("items")) {
      items = schema["items"];
    }
    uint64_t lo = count_at(schema, "minItems", path).value_or(0);
    std::optional<uint64_t> hi = count_at(schema, "maxItems", path);
    std::optional<std::string> item;
    if (!(items.is_boolean() && !items.get<bool>())) item = visit_unless_empty(items, path + "/items");
    const bool items_allowed = item.has_value();
    if (!items_allowed) hi = std::min<uint64_t>(hi.value_or(prefix.size()), prefix.size());
    if (hi && *hi < lo) matches_nothing(path, fmt::format("no array satisfies minItems {} and maxItems {} (with the item schemas)", lo, *hi));
    if (hi && *hi < prefix.size()) prefix.resize(*hi);  // maxItems cuts the tuple short
    std::string ws = primitive("ws");

    // Slot i is the i-th element; all slots after minItems are optional, nested so elements stay in order:
    // slot 0 (slot 1 (slot 2 rest)?)?, written front to back so that thousands of slots cost no recursion.
    std::string slots;
    size_t num_open_optional = 0;
    for (size_t i = 0; i < prefix.size(); ++i) {
      if (i >= lo) {
        slots += "(";
        ++num_open_optional;
      }
      slots += (i > 0 ? "\",\" " + ws + " " : "") + prefix[i] + " " + ws + " ";
    }
    if (items_allowed && !(hi && *hi <= prefix.size())) {
      const size_t i = prefix.size();
      uint64_t rest_lo = lo > i ? lo - i : 0;
      std::optional<uint64_t> rest_hi;
      if (hi) rest_hi = *hi - i;
      std::string sep = "\",\" " + ws + " " + *item + " " + ws;
      if (i > 0) {
        slots += repeated("(" + sep + ")", rest_lo, rest_hi);
      } else {
        std::string first = *item + " " + ws;
        std::optional<uint64_t> more_hi;
        if (rest_hi) more_hi = *rest_hi - 1;
        std::string list = first + " " + repeated("(" + sep + ")", rest_lo > 0 ? rest_lo - 1 : 0, more_hi);
        slots += rest_lo > 0 ? list : "(" + list + ")?";
      }
    }
    for (size_t k = 0; k < num_open_optional; ++k) slots += ")?";
    return rule("array", "\"[\" " + ws + " " + slots + " \"]\"");
  }

  // A JSON string that is none of `names` (keys of additional properties must not repeat declared ones). Tracked
  // positions take raw characters only, so no escape can spell a declared name.
  std::string key_excluding(const std::vector<std::string>& names, const std::string& path) {
    struct TrieNode {
      std::map<uint32_t, size_t> children;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const auto& name : names) {
      size_t at = 0;
      for (uint32_t cp : decode_utf8(name)) {
        auto it = trie[at].children.find(cp);
        if (it == trie[at].children.end()) {
          trie.push_back({});
          it = trie[at].children.emplace(cp, trie.size() - 1).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    primitive("json-char");
    std::function<std::string(size_t)> node_expr = [&](size_t at) -> std::string {
      DepthGuard guard(*this, path + "/properties");  // one level per letter of the longest name
      std::vector<std::string> alternatives;
      std::string others = "[^\"\\\\\\x00-\\x1F";
      for (const auto& [cp, child] : trie[at].children) {
        std::string bytes;
        append_utf8(bytes, cp);
        alternatives.push_back(ebnf_literal(bytes) + " " + node_expr(child));
        others += ebnf_class_char(cp);
      }
      alternatives.push_back(others + "] json-char* \"\\\"\"");
      if (!trie[at].terminal) alternatives.push_back("\"\\\"\"");
      return choice(alternatives);
    };
    return rule("additional-key", "\"\\\"\" " + node_expr(0));
  }

  // The object keywords that decide which properties appear, rewritten for generation into properties, required
  // and additionalProperties (a subset of the objects they allow; values are still checked against the schema as
  // written wherever literals are): dependencies make their dependents required, dependentSchemas are merged in,
  // minProperties makes optional properties required in schema order, maxProperties keeps the first optional ones
  // that fit and no additional ones.
  json object_constraints(json schema, const std::string& path) {
    DepthGuard guard(*this, path);  // dependent schemas may bring dependent schemas
    json dependent_schemas = json::array();
    std::vector<std::pair<std::string, json>> dependent_required;
    for (const char* key : {"dependentRequired", "dependencies", "dependentSchemas"}) {
      if (!schema.contains(key)) continue;
      if (!schema[key].is_object()) error(path + "/" + key, "must be an object");
      for (auto& [trigger, dependency] : schema[key].items()) {
        if (dependency.is_array()) {
          dependent_required.push_back({trigger, dependency});
        } else {
          dependent_schemas.push_back(dependency);
        }
      }
      schema.erase(key);
    }
    if (!dependent_schemas.empty()) {
      // Objects that satisfy the dependent schemas satisfy them whether their trigger appears or not.
      dependent_schemas.insert(dependent_schemas.begin(), schema);
      return object_constraints(merge_all_of(json{{"allOf", dependent_schemas}}, path), path);
    }
    if (!dependent_required.empty() || schema.contains("minProperties") || schema.contains("maxProperties")) {
      if (!schema.contains("required")) schema["required"] = json::array();
      auto is_required = [&](const std::string& name) {
        return std::find(schema["required"].begin(), schema["required"].end(), name) != schema["required"].end();
      };
      // A dependent may have dependents of its own: add until nothing changes.
      for (bool changed = true; changed;) {
        changed = false;
        for (const auto& [trigger, names] : dependent_required) {
          for (const auto& name : names) {
            if (!name.is_string()) error(path + "/dependentRequired/" + trigger, "must be an array of strings");
            if (is_required(name.get<std::string>())) continue;
            schema["required"].push_back(name);
            changed = true;
          }
        }
      }
      std::vector<std::string> optional;
      if (schema.contains("properties") && schema["properties"].is_object()) {
        for (auto& [name, unused] : schema["properties"].items()) {
          if (!is_required(name)) optional.push_back(name);
        }
      }
      size_t num_required = schema["required"].size();
      std::optional<uint64_t> min_properties = count_at(schema, "minProperties", path);
      std::optional<uint64_t> max_properties = count_at(schema, "maxProperties", path);
      if (min_properties && *min_properties > num_required) {
        size_t missing = *min_properties - num_required;
        if (missing > optional.size()) {
          error(path, fmt::format("minProperties {} needs more properties than the {} declared ones (objects with "
                                  "additional properties up to a count are not generated)", *min_properties,
                                  num_required + optional.size()));
        }
        for (size_t i = 0; i < missing; ++i) schema["required"].push_back(optional[i]);
        optional.erase(optional.begin(), optional.begin() + static_cast<std::ptrdiff_t>(missing));
      }
      if (max_properties) {
        if (*max_properties < schema["required"].size()) {
          error(path, fmt::format("maxProperties {} is less than the {} required properties", *max_properties,
                                  schema["required"].size()));
        }
        size_t room = *max_properties - schema["required"].size();
        for (size_t i = room; i < optional.size(); ++i) schema["properties"].erase(optional[i]);
        schema["additionalProperties"] = false;
        schema.erase("patternProperties");
      }
      schema.erase("minProperties");
      schema.erase("maxProperties");
    }
    return schema;
  }

  // patternProperties: a declared property whose name a pattern may match takes that pattern's schema too; each
  // pattern that matches no declared name adds keys spelled as whole matches of it, whose values follow every
  // pattern such a key may also match. Keys matching no pattern (additionalProperties) are not generated beside them.
  struct PatternMembers {
    std::vector<std::pair<std::string, std::string>> extras;  // key rule, value rule
  };
  PatternMembers pattern_members(json& properties, const json& required, const json& patterns, const std::string& path) {
    if (!patterns.is_object()) error(path + "/patternProperties", "must be an object");
    auto may_match = [&](const std::string& pattern, const std::string& name) {
      try {
        SchemaPatternSearch search(pattern);
        return search.found_in(name) || !search.exact();
      } catch (const Error& e) {
        error(path + "/patternProperties", e.what());
      }
    };
    std::set<std::string> names;
    for (auto& [name, unused] : properties.items()) names.insert(name);
    for (const auto& name : required) names.insert(name.get<std::string>());
    PatternMembers members;
    for (auto& [pattern, pattern_schema] : patterns.items()) {
      bool matches_a_name = false;
      for (const auto& name : names) {
        if (!may_match(pattern, name)) continue;
        matches_a_name = true;
        json& target = properties[name];
        target = both(target, pattern_schema);
      }
      if (matches_a_name) continue;
      json value = json{{"allOf", json::array({pattern_schema})}};
      for (auto& [other, other_schema] : patterns.items()) {
        if (other != pattern && pattern_matches_may_contain(pattern, other)) value["allOf"].push_back(other_schema);
      }
      std::string key_path = path + "/patternProperties/" + pattern;
      std::optional<std::string> member_value = visit_unless_empty(value["allOf"].size() == 1 ? pattern_schema : value, key_path);
      if (!member_value) continue;
      std::string key_ebnf;
      try {
        key_ebnf = to_ebnf(schema_pattern_found_expr(pattern, true));
      } catch (const Error& e) {
        error(key_path, e.what());
      }
      members.extras.push_back({rule("pattern-key", "\"\\\"\" " + key_ebnf + " \"\\\"\""), *member_value});
    }
    return members;
  }

  std::string object(const json& written, const std::string& path) {
    json schema = object_constraints(written, path);
    struct Property {
      std::string name;
      std::string value;
      bool required = false;
    };
    std::vector<Property> properties;
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) error(path + "/required", "must be an array of strings");
      for (const auto& r : schema["required"]) {
        if (!r.is_string()) error(path + "/required", "must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    std::vector<std::pair<std::string, std::string>> extra_members;  // key rule, value rule
    if (schema.contains("patternProperties")) {
      if (!schema.contains("properties")) schema["properties"] = json::object();
      if (!schema["properties"].is_object()) error(path + "/properties", "must be an object");
      extra_members = pattern_members(schema["properties"], schema.value("required", json::array()),
                                      schema["patternProperties"], path).extras;
    }
    std::set<std::string> declared;
    if (schema.contains("properties")) {
      if (!schema["properties"].is_object()) error(path + "/properties", "must be an object");
      for (auto& [name, sub] : schema["properties"].items()) {
        declared.insert(name);  // a property that matches nothing is never written, also not as an additional one
        const std::string property_path = path + "/properties/" + name;
        if (required.count(name)) {
          properties.push_back({name, visit(sub, property_path), true});
        } else if (auto value = visit_unless_empty(sub, property_path)) {
          properties.push_back({name, *value, false});
        }
      }
    }
    for (const auto& name : required) {
      if (!declared.count(name)) properties.push_back({name, primitive("json-value"), true});
    }
    std::string ws = primitive("ws");
    if (extra_members.empty() && schema.contains("additionalProperties") &&
        !(schema["additionalProperties"].is_boolean() && !schema["additionalProperties"].get<bool>())) {
      if (auto value = visit_unless_empty(schema["additionalProperties"], path + "/additionalProperties")) {
        std::vector<std::string> names(declared.begin(), declared.end());
        for (const auto& name : required) names.push_back(name);
        extra_members.push_back({names.empty() ? primitive("json-string") : key_excluding(names, path), *value});
      }
    }
    auto member = [&](const std::string& key, const std::string& value) {
      return key + " " + ws + " \":\" " + ws + " " + value + " " + ws;
    };
    auto extras = [&](bool first) -> std::string {
      if (extra_members.empty()) return "";
      std::vector<std::string> kvs;
      for (const auto& [key, value] : extra_members) kvs.push_back(member(key, value));
      std::string kv = choice(kvs);
      std::string more = "(\",\" " + ws + " " + kv + ")*";
      return first ? "(" + kv + " " + more + ")?" : more;
    };
    // After the first member every later one is "," member (optional ones wrapped in "?").
    auto after_first = [&](size_t i) {
      std::string out;
      for (; i < properties.size(); ++i) {
        std::string item = "\",\" " + ws + " " + member(ebnf_literal(json(properties[i].name).dump()), properties[i].value);
        out += properties[i].required ? item + " " : "(" + item + ")? ";
      }
      return out + extras(false);
    };
    // The first member is the first required property or any optional one before it, each followed by the rest:
    // one flat choice, so that thousands of optional properties cost neither recursion nor nesting.
    std::vector<std::string> first_members;
    size_t first_members_bytes = 0;
    size_t first = 0;
    for (; first < properties.size(); ++first) {
      first_members.push_back(member(ebnf_literal(json(properties[first].name).dump()), properties[first].value) + " " +
                              after_first(first + 1));
      // Each optional property before the first required one repeats the rest: quadratic in their number.
      first_members_bytes += first_members.back().size();
      if (first_members_bytes > kMaxGrammarBytes) {
        error(path, fmt::format("the grammar of this object's {} properties would exceed {} MiB{}", properties.size(),
                                kMaxGrammarBytes >> 20,
                                first > 0 ? " (each optional property before the first required one repeats the rest)" : ""));
      }
      if (properties[first].required) break;
    }
    if (first == properties.size()) first_members.push_back(extras(true));
    return rule("object", "\"{\" " + ws + " " + choice(first_members) + " \"}\"");
  }

  // Drafts 3 to 7 ignore the keywords beside a $ref.
  static bool refs_hide_siblings(const json& root) {
    return root.is_object() && root.contains("$schema") && root["$schema"].is_string() &&
           root["$schema"].get<std::string>().find("draft-0") != std::string::npos;
  }

  const json& root_;
  const bool refs_hide_siblings_;
  JsonSchemaValidator validator_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> defined_;
  std::unordered_map<std::string, std::string> rule_by_body_;
  std::unordered_map<std::string, std::string> ref_rules_;
  enum class Registered { kName, kBody, kRef };
  std::vector<std::pair<Registered, std::string>> journal_;  // what rules_' entries registered, in order
  int depth_ = 0;
  size_t num_steps_ = 0;
  size_t grammar_bytes_ = 0;  // of the named rules and the root
};

}  // namespace

std::string json_schema_to_ebnf(const nlohmann::json& schema) { return json_schema_to_ebnf(json(schema)); }

std::string json_schema_to_ebnf(const nlohmann::ordered_json& schema) {
  try {
    return SchemaConverter(schema).convert();
  } catch (const nlohmann::json::exception& e) {
    // A keyword with a value of the wrong JSON type somewhere the converter did not check explicitly.
    fail("invalid JSON schema: {}", e.what());
  }
}

std::string json_schema_to_ebnf(std::string_view schema_json) {
  // Copies and dumps of a parsed value recurse once per level.
  if (!json_nesting_within_limit(schema_json)) fail("invalid JSON schema: JSON {}", nesting_limit_message());
  json schema;
  try {
    schema = parse_ordered_json(schema_json);
  } catch (const nlohmann::json::parse_error& e) {
    fail("invalid JSON schema: not valid JSON at byte {}: {}", e.byte, e.what());
  }
  return json_schema_to_ebnf(schema);
}

std::string json_object_ebnf() {
  std::string out = "root ::= json-object\n";
  for (const auto& [name, body] : kPrimitives) {
    if (name != "json-integer") out += name + " ::= " + body + "\n";
  }
  return out;
}

}  // namespace tern::grammar
