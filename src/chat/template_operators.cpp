// Jinja's operators and lookups with Python's semantics: int/float arithmetic, str and list concatenation and
// repetition, floor division and modulo rounding toward negative infinity, slicing by code point.
#include <cmath>
#include <optional>
#include <fmt/format.h>

#include "chat/python_format.h"
#include "chat/python_string.h"
#include "chat/template_builtins.h"

namespace tern::chat {
namespace {

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t integral(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }  // throws for big ints
bool is_numeric(const Value& v) { return is_integral(v) || v.is_float(); }

[[noreturn]] void unsupported(const std::string& op, const Value& left, const Value& right) {
  throw EvalError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, left.type_name(),
                              right.type_name()));
}

// Past this many digits an int is a runaway template (`10 ** 10 ** 9`), not a chat format.
constexpr size_t kMaxIntegerDigits = 10'000;

Value bounded(const BigInt& value) {
  if (value.num_decimal_digits() > kMaxIntegerDigits) {
    throw EvalError(fmt::format("integer result longer than {} digits", kMaxIntegerDigits));
  }
  return Value::integer(value);
}

// Python's int arithmetic: exact at any size. int64 covers nearly every value; BigInt takes the rest.
Value integer_arithmetic(const std::string& op, const Value& left, const Value& right) {
  if (!left.is_big_int() && !right.is_big_int()) {
    int64_t a = integral(left);
    int64_t b = integral(right);
    int64_t result = 0;
    bool overflowed = op == "+"   ? __builtin_add_overflow(a, b, &result)
                      : op == "-" ? __builtin_sub_overflow(a, b, &result)
                      : op == "*" ? __builtin_mul_overflow(a, b, &result)
                                  : true;
    if (!overflowed) return Value(result);
    if ((op == "//" || op == "%") && !(a == INT64_MIN && b == -1)) {
      int64_t quotient = a / b;
      int64_t remainder = a % b;
      if (remainder != 0 && ((remainder < 0) != (b < 0))) {
        quotient -= 1;
        remainder += b;
      }
      return op == "//" ? Value(quotient) : Value(remainder);
    }
  }
  BigInt a = left.as_big_int();
  BigInt b = right.as_big_int();
  if (op == "+") return bounded(a + b);
  if (op == "-") return bounded(a - b);
  if (op == "*") {
    if (a.num_decimal_digits() + b.num_decimal_digits() > kMaxIntegerDigits + 18) {
      throw EvalError(fmt::format("integer result longer than {} digits", kMaxIntegerDigits));
    }
    return bounded(a * b);
  }
  if (op == "//" || op == "%") {
    BigInt quotient;
    BigInt remainder;
    BigInt::floor_divmod(a, b, quotient, remainder);
    return Value::integer(op == "//" ? quotient : remainder);
  }
  // **, with a non-negative exponent: square-and-multiply, bounded in size.
  auto exponent = b.to_int64();
  if (!exponent) throw EvalError(fmt::format("integer result longer than {} digits", kMaxIntegerDigits));
  BigInt power(1);
  BigInt base = a;
  for (int64_t e = *exponent; e > 0; e >>= 1) {
    if (e & 1) power = power * base;
    if (e > 1) base = base * base;
    if (power.num_decimal_digits() > kMaxIntegerDigits + 18 || base.num_decimal_digits() > 2 * kMaxIntegerDigits) {
      throw EvalError(fmt::format("integer result longer than {} digits", kMaxIntegerDigits));
    }
  }
  return bounded(power);
}

Value repeat(const Value& sequence, int64_t times) {
  constexpr int64_t kMaxRepeatedBytes = int64_t{64} << 20;
  if (sequence.is_string()) {
    if (times <= 0) return Value("");
    if (static_cast<int64_t>(sequence.as_string().size()) * times > kMaxRepeatedBytes) {
      throw EvalError("string repetition result is too large");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value(std::move(out));
  }
  ValueList out;
  if (times > 0 && static_cast<int64_t>(sequence.as_list().size()) * times > kMaxRepeatedBytes) {
    throw EvalError("list repetition result is too large");
  }
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
  return Value(std::move(out));
}

}  // namespace

void fail_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_name();
  throw EvalError(hint.empty() ? "undefined value used in an operation" : hint);
}

Value unary_minus(const Value& operand) {
  if (operand.is_undefined()) fail_undefined(operand);
  if (is_integral(operand)) return integer_arithmetic("-", Value(0), operand);
  if (operand.is_float()) return Value(-operand.as_double());
  throw EvalError(fmt::format("bad operand type for unary -: '{}'", operand.type_name()));
}

Value binary_operator(const std::string& op, const Value& left, const Value& right) {
  if (op == "~") return Value(left.to_str() + right.to_str());
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  if (is_numeric(left) && is_numeric(right)) {
    bool integers = is_integral(left) && is_integral(right);
    bool right_is_zero = !right.truthy();
    if (op == "+" || op == "-" || op == "*") {
      if (integers) return integer_arithmetic(op, left, right);
      double x = left.as_double();
      double y = right.as_double();
      return Value(op == "+" ? x + y : op == "-" ? x - y : x * y);
    }
    if (op == "/") {
      if (right_is_zero) throw EvalError("division by zero");
      return Value(left.as_double() / right.as_double());
    }
    if (op == "//" || op == "%") {
      if (right_is_zero) throw EvalError(op == "//" ? "integer division by zero" : "modulo by zero");
      if (integers) return integer_arithmetic(op, left, right);
      double x = left.as_double();
      double y = right.as_double();
      double remainder = std::fmod(x, y);
      if (remainder != 0 && ((remainder < 0) != (y < 0))) remainder += y;
      return op == "//" ? Value(std::floor(x / y)) : Value(remainder);
    }
    if (op == "**") {
      if (integers && !value_less(right, Value(0))) return integer_arithmetic(op, left, right);
      return Value(std::pow(left.as_double(), right.as_double()));
    }
  }
  if (op == "+") {
    if (left.is_string() && right.is_string()) return Value(left.as_string() + right.as_string());
    if (left.is_list() && right.is_list() && left.same_sequence_type(right) && !left.is_dict_view()) {
      ValueList out = left.as_list();
      out.insert(out.end(), right.as_list().begin(), right.as_list().end());
      return left.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
    }
    if (left.is_string() || (left.is_list() && !left.is_dict_view())) {
      throw EvalError(fmt::format("can only concatenate {} (not \"{}\") to {}", left.type_name(), right.type_name(),
                                  left.type_name()));
    }
  }
  if (op == "*") {
    if ((left.is_string() || left.is_list()) && is_integral(right)) return repeat(left, integral(right));
    if ((right.is_string() || right.is_list()) && is_integral(left)) return repeat(right, integral(left));
  }
  if (op == "%" && left.is_string()) return Value(python_percent_format(left.as_string(), right));
  unsupported(op, left, right);
}

bool value_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (item.is_undefined()) fail_undefined(item);
      if (!item.is_string()) {
        throw EvalError(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& element : container.as_list()) {
        if (values_equal(element, item)) return true;
      }
      return false;
    case Value::Kind::kMap: return container.as_map().find(item) != nullptr;
    default: throw EvalError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

namespace {

std::string object_description(const Value& object) {
  if (object.is_none()) return "'None'";
  return fmt::format("'{} object'", object.type_name());
}

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined(fmt::format("{} has no attribute '{}'", object_description(object), name));
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_map()) {
    if (!object.is_namespace()) {
      Value method = bound_method(object, name);
      if (!method.is_undefined()) return method;
    }
    if (const Value* found = object.as_map().find(name)) return *found;
    return missing_attribute(object, name);
  }
  if (object.is_group_tuple() && (name == "grouper" || name == "list")) return object.as_list()[name == "grouper" ? 0 : 1];
  if (object.is_string() || object.is_list()) {
    Value method = bound_method(object, name);
    if (!method.is_undefined()) return method;
  }
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict_view()) throw EvalError(fmt::format("'{}' object is not subscriptable", object.type_name()));
  // Jinja's getitem: a key the object does not have (an undefined key included) gives undefined, not an error.
  if (object.is_map()) {
    const Value* found = nullptr;
    try {
      found = object.as_map().find(key);
    } catch (const EvalError&) {  // an unhashable key is a TypeError, which Jinja turns into undefined too
    }
    if (found) return *found;
    if (key.is_string() && !object.is_namespace()) {
      Value method = bound_method(object, key.as_string());
      if (!method.is_undefined()) return method;
    }
    return Value::undefined(fmt::format("{} has no element {}", object_description(object), key.repr()));
  }
  if ((object.is_list() || object.is_string()) && is_integral(key)) {
    int64_t index = integral(key);
    if (object.is_list()) {
      const auto& list = object.as_list();
      auto size = static_cast<int64_t>(list.size());
      if (index < 0) index += size;
      if (index >= 0 && index < size) return list[static_cast<size_t>(index)];
    } else {
      std::u32string code_points = decode_utf8(object.as_string());
      auto size = static_cast<int64_t>(code_points.size());
      if (index < 0) index += size;
      if (index >= 0 && index < size) return Value(encode_utf8(code_points.substr(static_cast<size_t>(index), 1)));
    }
    return Value::undefined(fmt::format("{} has no element {}", object_description(object), index));
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object_description(object), key.repr()));
}

Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict_view()) throw EvalError(fmt::format("'{}' object is not subscriptable", object.type_name()));
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!is_integral(v)) throw EvalError(fmt::format("slice {} must be an integer or none", what));
    return integral(v);
  };
  int64_t step_value = bound(step, "step").value_or(1);
  if (step_value == 0) throw EvalError("slice step cannot be zero");
  std::u32string code_points;
  int64_t size = 0;
  if (object.is_string()) {
    code_points = decode_utf8(object.as_string());
    size = static_cast<int64_t>(code_points.size());
  } else if (object.is_list()) {
    size = static_cast<int64_t>(object.as_list().size());
  } else {
    throw EvalError(fmt::format("'{}' object is not subscriptable", object.type_name()));
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> value, int64_t default_value) {
    if (!value) return default_value;
    int64_t v = *value;
    if (v < 0) {
      v += size;
      if (v < 0) v = step_value < 0 ? -1 : 0;
    } else if (v >= size) {
      v = step_value < 0 ? size - 1 : size;
    }
    return v;
  };
  int64_t first = adjust(bound(start, "start"), step_value < 0 ? size - 1 : 0);
  int64_t last = adjust(bound(stop, "stop"), step_value < 0 ? -1 : size);
  std::vector<int64_t> indices;
  for (int64_t i = first; step_value > 0 ? i < last : i > last; i += step_value) indices.push_back(i);
  if (object.is_string()) {
    std::u32string out;
    for (int64_t i : indices) out += code_points[static_cast<size_t>(i)];
    return Value(encode_utf8(out));
  }
  ValueList out;
  for (int64_t i : indices) out.push_back(object.as_list()[static_cast<size_t>(i)]);
  return Value(std::move(out));
}

ValueList iterate_value(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return value.as_list();
    case Value::Kind::kMap: {
      ValueList keys;
      for (const auto& [key, unused] : value.as_map().entries()) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList characters;
      for (char32_t c : decode_utf8(value.as_string())) characters.emplace_back(encode_utf8(std::u32string(1, c)));
      return characters;
    }
    default: throw EvalError(fmt::format("'{}' object is not iterable", value.type_name()));
  }
}

int64_t int_argument(const Value& value, const std::string& what, int64_t fallback) {
  if (value.is_undefined() || value.is_none()) return fallback;
  if (!is_integral(value)) throw EvalError(fmt::format("{} must be an integer, got {}", what, value.type_name()));
  return integral(value);
}

std::string string_argument(const Value& value, const std::string& what) {
  if (value.is_undefined()) fail_undefined(value);
  if (!value.is_string()) throw EvalError(fmt::format("{} must be a string, got {}", what, value.type_name()));
  return value.as_string();
}

}  // namespace tern::chat
