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
#include "grammar/regex_parser.h"

namespace tern::grammar {
namespace {

// Ordered: object properties are generated in the schema's order, as OpenAI's structured outputs write them.
using json = nlohmann::ordered_json;

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

const std::set<std::string> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "contentMediaType", "contentEncoding", "$anchor", "$defs", "definitions", "format", "nullable"};

const std::set<std::string> kUnsupported = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "contains", "minContains", "maxContains", "multipleOf", "minProperties", "maxProperties",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

const std::map<std::string, std::string> kFormatRegexes = {
    {"date", R"([0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8])))"},
    {"time", R"((?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))"},
    {"email", R"([a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)"},
    {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
    {"ipv4", R"((?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))"},
    // Absolute URIs (RFC 3986) spelled with unreserved characters only, a subset every validator accepts.
    // (a non-empty hier-part: ajv and RFC 3986 validators differ on "scheme:" alone).
    {"uri", R"([a-zA-Z][a-zA-Z0-9+.-]*:(?://[a-zA-Z0-9._~-]+(?::[0-9]{1,5})?(?:/[a-zA-Z0-9._~-]*)*|/?[a-zA-Z0-9._~-]+(?:/[a-zA-Z0-9._~-]*)*)(?:\?[a-zA-Z0-9._~=&-]*)?(?:#[a-zA-Z0-9._~-]*)?)"},
};

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

class SchemaConverter {
 public:
  explicit SchemaConverter(const json& root) : root_(root) {}

  std::string convert() {
    std::string root_body = visit(root_, "");
    std::string out = "root ::= " + root_body + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& path, const std::string& message) const {
    fail("invalid JSON schema at '{}': {}", path.empty() ? "/" : path, message);
  }

  std::string primitive(const std::string& name) {
    if (defined_.count(name)) return name;
    for (const auto& [primitive_name, body] : kPrimitives) {
      if (primitive_name != name) continue;
      defined_.insert(name);
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
    return name;
  }

  // A named rule for a body, shared by identical bodies.
  std::string rule(const std::string& hint, const std::string& body) {
    auto it = rule_by_body_.find(body);
    if (it != rule_by_body_.end()) return it->second;
    std::string name = fresh_name(hint);
    rules_.push_back({name, body});
    rule_by_body_.emplace(body, name);
    return name;
  }

  const json& resolve_pointer(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') error(path, fmt::format("only local $ref (\"#...\") is supported, got '{}'", ref));
    try {
      return root_.at(json::json_pointer(ref.substr(1)));
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
    std::string body = visit(target, ref.substr(1));
    rules_.push_back({name, body});
    return name;
  }

  // allOf: the sub-schemas' keywords combined (properties and required united, later keywords otherwise win).
  json merge_all_of(const json& schema, const std::string& path) {
    DepthGuard guard(*this, path);
    json merged = json::object();
    auto merge_in = [&](const json& part, const std::string& part_path) {
      const json* sub = &part;
      std::set<std::string> seen_refs;
      while (sub->is_object() && sub->contains("$ref")) {
        if (!(*sub)["$ref"].is_string()) error(part_path, "$ref must be a string");
        std::string ref = (*sub)["$ref"].get<std::string>();
        if (!seen_refs.insert(ref).second) error(part_path, "allOf through a $ref cycle");
        sub = &resolve_pointer(ref, part_path);
      }
      if (!sub->is_object()) error(part_path, "allOf entries must be schema objects");
      json flat = sub->contains("allOf") ? merge_all_of(*sub, part_path) : *sub;
      for (auto& [key, value] : flat.items()) {
        if (key == "properties" && merged.contains("properties")) {
          for (auto& [prop, prop_schema] : value.items()) {
            json& target = merged["properties"][prop];
            target = target.is_null() ? prop_schema : json{{"allOf", json::array({target, prop_schema})}};
          }
        } else if (key == "required" && merged.contains("required")) {
          for (const auto& name : value) {
            if (std::find(merged["required"].begin(), merged["required"].end(), name) == merged["required"].end()) {
              merged["required"].push_back(name);
            }
          }
        } else if (key == "type" && merged.contains("type") && merged["type"] != value) {
          auto is = [](const json& t, const char* name) { return t.is_string() && t.get<std::string>() == name; };
          if ((is(value, "integer") && is(merged["type"], "number")) || (is(value, "number") && is(merged["type"], "integer"))) {
            merged["type"] = "integer";
          } else {
            error(part_path, fmt::format("allOf combines incompatible types {} and {}", merged["type"].dump(), value.dump()));
          }
        } else {
          merged[key] = value;
        }
      }
    };
    for (auto& [key, value] : schema.items()) {
      if (key != "allOf") merge_in(json{{key, value}}, path);
    }
    const json& parts = schema["allOf"];
    if (!parts.is_array() || parts.empty()) error(path + "/allOf", "must be a non-empty array");
    for (size_t i = 0; i < parts.size(); ++i) merge_in(parts[i], fmt::format("{}/allOf/{}", path, i));
    return merged;
  }

  // Bounds recursion through nesting, allOf and $ref chains (a cycle of allOf through $ref never ends otherwise)
  // and the letters of a property name that key_excluding spells out.
  struct DepthGuard {
    explicit DepthGuard(SchemaConverter& c, const std::string& path) : converter(c) {
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
      if (!schema.get<bool>()) error(path, "schema 'false' matches nothing");
      return primitive("json-value");
    }
    if (!schema.is_object()) error(path, "a schema must be an object or a boolean");
    for (auto& [key, value] : schema.items()) {
      if (kUnsupported.count(key)) error(path, fmt::format("keyword '{}' is not supported", key));
      if (key == "uniqueItems" && value == true) error(path, "keyword 'uniqueItems' is not supported");
    }
    if (schema.contains("nullable") && schema["nullable"] == true) {
      json rest = schema;
      rest.erase("nullable");
      return choice({visit(rest, path), "\"null\""});
    }
    if (schema.contains("allOf")) return visit(merge_all_of(schema, path), path);
    if (schema.contains("$ref")) {
      if (!schema["$ref"].is_string()) error(path + "/$ref", "must be a string");
      return visit_ref(schema["$ref"].get<std::string>(), path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const json& branches = schema[key];
      if (!branches.is_array() || branches.empty()) error(path + "/" + key, "must be a non-empty array");
      json siblings = schema;
      siblings.erase(key);
      bool constrained_siblings = false;
      for (auto& [k, unused] : siblings.items()) constrained_siblings |= !kAnnotations.count(k) || k == "format";
      std::vector<std::string> alternatives;
      for (size_t i = 0; i < branches.size(); ++i) {
        std::string branch_path = fmt::format("{}/{}/{}", path, key, i);
        if (constrained_siblings) {
          alternatives.push_back(visit(json{{"allOf", json::array({siblings, branches[i]})}}, branch_path));
        } else {
          alternatives.push_back(visit(branches[i], branch_path));
        }
      }
      return choice(alternatives);
    }
    if (schema.contains("const")) return ebnf_literal(schema["const"].dump());
    if (schema.contains("enum")) {
      const json& values = schema["enum"];
      if (!values.is_array() || values.empty()) error(path + "/enum", "must be a non-empty array");
      std::vector<std::string> alternatives;
      for (const auto& value : values) alternatives.push_back(ebnf_literal(value.dump()));
      return choice(alternatives);
    }

    json type = schema.contains("type") ? schema["type"] : json();
    if (type.is_null()) {
      if (schema.contains("properties") || schema.contains("additionalProperties") || schema.contains("required")) {
        type = "object";
      } else if (schema.contains("items") || schema.contains("prefixItems") || schema.contains("minItems") || schema.contains("maxItems")) {
        type = "array";
      } else if (schema.contains("pattern") || schema.contains("minLength") || schema.contains("maxLength")) {
        type = "string";
      } else {
        return primitive("json-value");
      }
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
  }

  std::string integer(const json& schema, const std::string& path) {
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
    std::optional<int64_t> lo, hi;
    integer_bounds(schema, path, lo, hi);
    if (!lo && !hi) return primitive("json-number");
    int64_t low = lo ? std::max(*lo, -kMaxJsonIntegerMagnitude) : -kMaxJsonIntegerMagnitude;
    int64_t high = hi ? std::min(*hi, kMaxJsonIntegerMagnitude) : kMaxJsonIntegerMagnitude;
    if (low > high) error(path, fmt::format("no number lies in [{}, {}] (bounds rounded to integers)", low, high));
    std::vector<std::string> alternatives{integer_range_ebnf(low, high)};
    // I.F lies strictly between I and I + 1; -I.F strictly between -(I + 1) and -I.
    if (std::max<int64_t>(low, 0) <= high - 1) {
      alternatives.push_back(unsigned_range_ebnf(std::max<int64_t>(low, 0), high - 1) + " \".\" [0-9]+");
    }
    if (std::max<int64_t>(0, -high) <= -low - 1) {
      alternatives.push_back("\"-\" " + unsigned_range_ebnf(std::max<int64_t>(0, -high), -low - 1) + " \".\" [0-9]+");
    }
    return rule("number", choice(alternatives));
  }

  std::optional<uint64_t> count_at(const json& schema, const char* key, const std::string& path) {
    if (!schema.contains(key)) return std::nullopt;
    const json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) error(path + "/" + key, "must be a non-negative integer");
    if (v.get<int64_t>() > 100000) error(path + "/" + key, "is too large (limit 100000)");
    return v.get<uint64_t>();
  }

  std::string string(const json& schema, const std::string& path) {
    std::optional<uint64_t> min_len = count_at(schema, "minLength", path);
    std::optional<uint64_t> max_len = count_at(schema, "maxLength", path);
    bool has_length = min_len || max_len;
    if (schema.contains("pattern")) {
      if (has_length) error(path, "'pattern' together with 'minLength'/'maxLength' is not supported");
      if (!schema["pattern"].is_string()) error(path + "/pattern", "must be a string");
      return rule("pattern", "\"\\\"\" " + regex_ebnf(schema["pattern"].get<std::string>(), path + "/pattern") + " \"\\\"\"");
    }
    if (schema.contains("format") && schema["format"].is_string()) {
      std::string format = schema["format"].get<std::string>();
      std::string regex;
      if (format == "date-time") {
        regex = kFormatRegexes.at("date") + "T" + kFormatRegexes.at("time");
      } else if (kFormatRegexes.count(format)) {
        regex = kFormatRegexes.at(format);
      }
      // Other formats (hostname, ...) are annotations here: any string.
      if (!regex.empty()) {
        if (has_length) error(path, "'format' together with 'minLength'/'maxLength' is not supported");
        return rule(format, "\"\\\"\" " + regex_ebnf(regex, path + "/format") + " \"\\\"\"");
      }
    }
    if (!has_length) return primitive("json-string");
    uint64_t lo = min_len.value_or(0);
    if (max_len && *max_len < lo) error(path, "maxLength is smaller than minLength");
    primitive("json-char");
    return rule("string", "\"\\\"\" json-char" + repeat_suffix(lo, max_len) + " \"\\\"\"");
  }

  std::string regex_ebnf(const std::string& pattern, const std::string& path) {
    try {
      return to_ebnf(parse_regex(pattern, {.json_string_escaping = true}));
    } catch (const Error& e) {
      error(path, e.what());
    }
  }

  std::string array(const json& schema, const std::string& path) {
    std::vector<std::string> prefix;
    json items = json(true);
    if (schema.contains("prefixItems")) {
      const json& p = schema["prefixItems"];
      if (!p.is_array()) error(path + "/prefixItems", "must be an array");
      for (size_t i = 0; i < p.size(); ++i) prefix.push_back(visit(p[i], fmt::format("{}/prefixItems/{}", path, i)));
      if (schema.contains("items")) items = schema["items"];
    } else if (schema.contains("items") && schema["items"].is_array()) {  // draft 4 tuples
      const json& p = schema["items"];
      for (size_t i = 0; i < p.size(); ++i) prefix.push_back(visit(p[i], fmt::format("{}/items/{}", path, i)));
      if (schema.contains("additionalItems")) items = schema["additionalItems"];
    } else if (schema.contains("items")) {
      items = schema["items"];
    }
    uint64_t lo = count_at(schema, "minItems", path).value_or(0);
    std::optional<uint64_t> hi = count_at(schema, "maxItems", path);
    bool items_allowed = !(items.is_boolean() && !items.get<bool>());
    if (!items_allowed) hi = std::min<uint64_t>(hi.value_or(prefix.size()), prefix.size());
    if (hi && *hi < lo) error(path, fmt::format("no array satisfies minItems {} and maxItems {} (with the item schemas)", lo, *hi));
    if (hi && *hi < prefix.size()) prefix.resize(*hi);  // maxItems cuts the tuple short
    std::string item = items_allowed ? visit(items, path + "/items") : "";
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
      std::string sep = "\",\" " + ws + " " + item + " " + ws;
      if (i > 0) {
        slots += "(" + sep + ")" + repeat_suffix(rest_lo, rest_hi);
      } else {
        std::string first = item + " " + ws;
        std::optional<uint64_t> more_hi;
        if (rest_hi) more_hi = *rest_hi - 1;
        std::string list = first + " (" + sep + ")" + repeat_suffix(rest_lo > 0 ? rest_lo - 1 : 0, more_hi);
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

  std::string object(const json& schema, const std::string& path) {
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
    std::set<std::string> declared;
    if (schema.contains("properties")) {
      if (!schema["properties"].is_object()) error(path + "/properties", "must be an object");
      for (auto& [name, sub] : schema["properties"].items()) {
        std::string value = visit(sub, path + "/properties/" + name);
        properties.push_back({name, value, required.count(name) > 0});
        declared.insert(name);
      }
    }
    for (const auto& name : required) {
      if (!declared.count(name)) properties.push_back({name, primitive("json-value"), true});
    }
    std::string ws = primitive("ws");
    std::string extra_key, extra_value;
    if (schema.contains("additionalProperties") && !(schema["additionalProperties"].is_boolean() && !schema["additionalProperties"].get<bool>())) {
      std::vector<std::string> names;
      for (const auto& p : properties) names.push_back(p.name);
      extra_key = names.empty() ? primitive("json-string") : key_excluding(names, path);
      extra_value = visit(schema["additionalProperties"], path + "/additionalProperties");
    }
    auto member = [&](const std::string& key, const std::string& value) {
      return key + " " + ws + " \":\" " + ws + " " + value + " " + ws;
    };
    auto extras = [&](bool first) -> std::string {
      if (extra_key.empty()) return "";
      std::string kv = member(extra_key, extra_value);
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
    size_t first = 0;
    for (; first < properties.size(); ++first) {
      first_members.push_back(member(ebnf_literal(json(properties[first].name).dump()), properties[first].value) + " " +
                              after_first(first + 1));
      if (properties[first].required) break;
    }
    if (first == properties.size()) first_members.push_back(extras(true));
    return rule("object", "\"{\" " + ws + " " + choice(first_members) + " \"}\"");
  }

  const json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> defined_;
  std::unordered_map<std::string, std::string> rule_by_body_;
  std::unordered_map<std::string, std::string> ref_rules_;
  int depth_ = 0;
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
