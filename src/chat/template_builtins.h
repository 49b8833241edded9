#pragma once
// The operators, attribute lookups, filters, tests, methods and global functions of the Jinja subset.
// Each throws EvalError on bad input; the interpreter adds the line and column of the expression.
#include <string>

#include "chat/value.h"

namespace tern::chat {

// Thrown by the raise_exception() global: the template itself rejected its input.
class TemplateRaised : public EvalError {
 public:
  explicit TemplateRaised(const std::string& message) : EvalError(message) {}
};

// ---- operators (template_operators.cpp) ----
Value binary_operator(const std::string& op, const Value& left, const Value& right);
Value unary_minus(const Value& operand);
bool value_contains(const Value& container, const Value& item);  // Python's `item in container`
// Jinja's getattr: for `obj.name` methods come first, then keys; for `obj[key]` keys come first.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);
// What `for x in value` iterates: list items, dict keys, string characters; undefined iterates nothing.
ValueList iterate_value(const Value& value);
// Throws the UndefinedError Jinja raises when an undefined value is used in an operation.
[[noreturn]] void fail_undefined(const Value& undefined);

// ---- methods of str, dict and list (template_methods.cpp) ----
// A bound method `object.name`, or undefined if the type has no such method.
Value bound_method(const Value& object, const std::string& name);

// ---- filters and tests (template_filters.cpp, template_tests.cpp) ----
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool has_filter(const std::string& name);
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);
bool has_test(const std::string& name);

// ---- globals (template_globals.cpp) ----
// range, dict, namespace, raise_exception and strftime_now, as Jinja and Hugging Face define them.
ValueMap builtin_globals();

// Python-style argument helpers shared by the builtins.
int64_t int_argument(const Value& value, const std::string& what, int64_t fallback);
std::string string_argument(const Value& value, const std::string& what);

}  // namespace tern::chat
