// Jinja's tests (`value is defined`, `x is divisibleby 3`...), with Python's notion of each type.
#include <fmt/format.h>

#include <functional>
#include <unordered_map>

#include "chat/python_string.h"
#include "chat/template_builtins.h"

namespace tern::chat {
namespace {

using Test = std::function<bool(const Value& value, const CallArgs& args)>;

// value % divisor for an int or bool `value` of any size.
Value integer_remainder(const Value& value, const Value& divisor, const std::string& test) {
  if (value.is_undefined()) fail_undefined(value);
  if (!value.is_int() && !value.is_bool()) {
    throw EvalError(fmt::format("test '{}' needs an integer, got {}", test, value.type_name()));
  }
  return binary_operator("%", value, divisor);
}

const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> kTests = [] {
    std::unordered_map<std::string, Test> t;
    t["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    // In Python bool is a subclass of int: it is a number, but Jinja's `integer` test excludes it.
    t["number"] = [](const Value& v, const CallArgs&) { return v.is_number() || v.is_bool(); };
    t["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
    t["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["mapping"] = [](const Value& v, const CallArgs&) { return v.is_map(); };
    // Undefined iterates as empty and has a length, so Jinja counts it as iterable and a sequence.
    t["iterable"] = [](const Value& v, const CallArgs&) {
      return v.is_list() || v.is_map() || v.is_string() || v.is_undefined();
    };
    t["sequence"] = t["iterable"];
    t["callable"] = [](const Value& v, const CallArgs&) { return v.is_function(); };
    t["equalto"] = [](const Value& v, const CallArgs& args) { return values_equal(v, args.get(0, "other")); };
    t["eq"] = t["equalto"];
    t["=="] = t["equalto"];
    t["ne"] = [](const Value& v, const CallArgs& args) { return !values_equal(v, args.get(0, "other")); };
    t["!="] = t["ne"];
    t["lt"] = [](const Value& v, const CallArgs& args) { return value_less(v, args.get(0, "other")); };
    t["<"] = t["lt"];
    t["lessthan"] = t["lt"];
    t["gt"] = [](const Value& v, const CallArgs& args) { return value_less(args.get(0, "other"), v); };
    t[">"] = t["gt"];
    t["greaterthan"] = t["gt"];
    t["le"] = [](const Value& v, const CallArgs& args) { return !value_less(args.get(0, "other"), v); };
    t["<="] = t["le"];
    t["ge"] = [](const Value& v, const CallArgs& args) { return !value_less(v, args.get(0, "other")); };
    t[">="] = t["ge"];
    t["sameas"] = [](const Value& v, const CallArgs& args) {
      const Value other = args.get(0, "other");
      if (v.kind() != other.kind()) return false;
      if (v.is_none() || v.is_bool()) return values_equal(v, other);
      return false;  // distinct objects: Python's `is` compares identity
    };
    t["in"] = [](const Value& v, const CallArgs& args) { return value_contains(args.get(0, "seq"), v); };
    t["odd"] = [](const Value& v, const CallArgs&) { return integer_remainder(v, Value(2), "odd").truthy(); };
    t["even"] = [](const Value& v, const CallArgs&) { return !integer_remainder(v, Value(2), "even").truthy(); };
    t["divisibleby"] = [](const Value& v, const CallArgs& args) {
      Value divisor = args.get(0, "num");
      if (!divisor.is_int() && !divisor.is_bool()) throw EvalError("divisibleby() argument must be an integer");
      if (!divisor.truthy()) throw EvalError("divisibleby(0): division by zero");
      return !integer_remainder(v, divisor, "divisibleby").truthy();
    };
    t["lower"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && python_lower(v.as_string()) == v.as_string();
    };
    t["upper"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && python_upper(v.as_string()) == v.as_string();
    };
    t["escaped"] = [](const Value&, const CallArgs&) { return false; };
    t["filter"] = [](const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.as_string()); };
    t["test"] = [](const Value& v, const CallArgs&) { return v.is_string() && has_test(v.as_string()); };
    return t;
  }();
  return kTests;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw EvalError(fmt::format("no test named '{}'", name));
  return it->second(value, args);
}

}  // namespace tern::chat
