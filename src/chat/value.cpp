#include "chat/value.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <utility>

#include "chat/python_string.h"
#include "core/nesting_limit.h"

namespace tern::chat {

const Value* ValueMap::find(const std::string& key) const {
  if (!index_.empty()) {
    const auto it = index_.find(hash_key(Value(key)));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

Value* ValueMap::find(const std::string& key) {
  return const_cast<Value*>(std::as_const(*this).find(key));
}

const Value* ValueMap::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  std::string hashed = hash_key(key);
  if (!index_.empty()) {
    const auto it = index_.find(hashed);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_) {
    if (!k.is_string() && hash_key(k) == hashed) return &v;
  }
  return nullptr;
}

void ValueMap::set(const std::string& key, Value value) { set(Value(key), std::move(value)); }

void ValueMap::set(const char* key, Value value) { set(Value(key), std::move(value)); }

void ValueMap::set(const Value& key, Value value) {
  if (Value* existing = const_cast<Value*>(find(key))) {
    *existing = std::move(value);  // Python keeps the first key (1 stays 1 after d[1.0] = ...) and updates the value
    return;
  }
  entries_.emplace_back(key, std::move(value));
  if (!index_.empty()) {
    index_.emplace(hash_key(key), entries_.size() - 1);
  } else if (entries_.size() == kIndexedSize) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(hash_key(entries_[i].first), i);
  }
}

namespace {

std::string tagged(char tag, const std::string& text) {
  std::string out(1, tag);
  out += text;
  return out;
}

}  // namespace

std::string hash_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return tagged('s', key.as_string());
    case Value::Kind::kBool: return key.as_bool() ? "i1" : "i0";
    case Value::Kind::kInt: return tagged('i', key.repr());
    case Value::Kind::kFloat: {
      double d = key.as_double();
      // An integral float hashes as the int it equals.
      if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18) {
        return tagged('i', std::to_string(static_cast<int64_t>(d)));
      }
      return tagged('f', key.repr());
    }
    case Value::Kind::kNone: return "n";
    case Value::Kind::kList:
      if (key.is_tuple()) {
        std::string out = "t(";
        for (const auto& item : key.as_list()) out += hash_key(item) + ",";
        return out + ")";
      }
      break;
    case Value::Kind::kFunction: return fmt::format("F{}", static_cast<const void*>(&key.as_function()));
    default: break;
  }
  throw EvalError(fmt::format("unhashable type: '{}'", key.type_name()));
}

Value CallArgs::get(size_t position, const std::string& name) const {
  if (position < positional.size()) return positional[position];
  for (const auto& [key, value] : keyword) {
    if (key == name) return value;
  }
  return Value::undefined(name);
}

Value Value::undefined(std::string name) {
  Value v;
  v.data_ = UndefinedTag{std::move(name)};
  return v;
}

Value Value::none() {
  Value v;
  v.data_ = NoneTag{};
  return v;
}

Value Value::function(std::string name, NativeFunction call) {
  Value v;
  v.data_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

Value Value::tuple(ValueList items) {
  Value v(std::move(items));
  v.sequence_ = Sequence::kTuple;
  return v;
}

Value Value::group_tuple(Value grouper, ValueList items) {
  Value v(ValueList{std::move(grouper), Value(std::move(items))});
  v.sequence_ = Sequence::kGroupTuple;
  return v;
}

Value Value::dict_view(ValueList items, View view) {
  Value v(std::move(items));
  v.sequence_ = view == View::kKeys ? Sequence::kDictKeys : view == View::kValues ? Sequence::kDictValues : Sequence::kDictItems;
  return v;
}

Value Value::namespace_object(ValueMap map) {
  Value v(std::move(map));
  v.is_namespace_ = true;
  return v;
}

namespace {

// `depth` counts the arrays and objects around `json`: request data (messages, tool schemas) is converted here, and
// Values, like this conversion, recurse once per level when compared, printed or destroyed.
template <typename Json>
Value value_from_json(const Json& json, int& depth) {
  switch (json.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value(json.template get<bool>());
    case Json::value_t::number_integer: return Value(json.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      auto u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::integer(*BigInt::from_decimal(std::to_string(u)));
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value(json.template get<double>());
    case Json::value_t::string: return Value(json.template get<std::string>());
    case Json::value_t::array: {
      NestingLevel level(depth, "chat template input");
      ValueList list;
      list.reserve(json.size());
      for (const auto& item : json) list.push_back(value_from_json(item, depth));
      return Value(std::move(list));
    }
    case Json::value_t::object: {
      NestingLevel level(depth, "chat template input");
      ValueMap map;
      for (auto it = json.begin(); it != json.end(); ++it) {
        map.set(static_cast<const std::string&>(it.key()), value_from_json(it.value(), depth));
      }
      return Value(std::move(map));
    }
    default: return Value::none();  // binary and discarded values do not occur in parsed JSON text
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& json) {
  int depth = 0;
  return value_from_json(json, depth);
}

Value Value::from_json(const nlohmann::json& json) {
  int depth = 0;
  return value_from_json(json, depth);
}

Value::Kind Value::kind() const { return is_big_int() ? Kind::kInt : static_cast<Kind>(data_.index()); }

Value Value::integer(const BigInt& value) {
  if (auto small = value.to_int64()) return Value(*small);
  Value v;
  v.data_ = std::make_shared<const BigInt>(value);
  return v;
}

int64_t Value::as_int() const {
  if (is_big_int()) throw EvalError(fmt::format("int too large to convert to a 64-bit integer: {}", repr()));
  return std::get<int64_t>(data_);
}

BigInt Value::as_big_int() const {
  if (is_big_int()) return *std::get<std::shared_ptr<const BigInt>>(data_);
  if (is_bool()) return BigInt(int64_t{as_bool()});
  return BigInt(std::get<int64_t>(data_));
}

double Value::as_double() const {
  switch (kind()) {
    case Kind::kInt: {
      if (!is_big_int()) return static_cast<double>(as_int());
      double d = as_big_int().to_double();
      if (std::isinf(d)) throw EvalError("int too large to convert to float");
      return d;
    }
    case Kind::kFloat: return std::get<double>(data_);
    case Kind::kBool: return as_bool() ? 1.0 : 0.0;
    default: throw EvalError(fmt::format("expected a number, got {}", type_name()));
  }
}

ValueMap& Value::namespace_map() const {
  if (!is_namespace()) throw EvalError(fmt::format("cannot assign an attribute of a {}", type_name()));
  return *std::get<std::shared_ptr<ValueMap>>(data_);
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return is_big_int() || as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kMap: return as_map().size() != 0;
    case Kind::kFunction: return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), d, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  // scientific is "[-]d[.ddd]e[+-]xx": split into sign, digits and the exponent of the first digit.
  bool negative = scientific[0] == '-';
  size_t e_pos = scientific.find('e');
  std::string mantissa = scientific.substr(negative ? 1 : 0, e_pos - (negative ? 1 : 0));
  int exponent = std::stoi(scientific.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    auto integer_len = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= integer_len) {
      out += digits + std::string(integer_len - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, integer_len) + "." + digits.substr(integer_len);
    }
  }
  return out;
}

std::string Value::to_str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return is_big_int() ? as_big_int().to_string() : std::to_string(as_int());
    case Kind::kFloat: return python_float_repr(as_double());
    case Kind::kString: return python_string_repr(as_string());
    case Kind::kList: {
      std::string out = is_dict_view() ? type_name() + "([" : is_tuple() ? "(" : "[";
      bool first = true;
      for (const auto& item : as_list()) {
        if (!first) out += ", ";
        first = false;
        out += item.repr();
      }
      if (is_tuple()) return out + (as_list().size() == 1 ? ",)" : ")");
      return out + (is_dict_view() ? "])" : "]");
    }
    case Kind::kMap: {
      std::string out = is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, value] : as_map().entries()) {
        if (!first) out += ", ";
        first = false;
        out += key.repr() + ": " + value.repr();
      }
      return out + (is_namespace() ? "}>" : "}");
    }
    case Kind::kFunction: return fmt::format("<function {}>", as_function().name);
  }
  return "";
}

namespace {

void append_json_string(std::string& out, const std::string& text) {
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// json.dumps turns the keys it accepts into strings: 1 -> "1", true -> "true", None -> "null", 1.5 -> "1.5".
std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.as_string();
    case Value::Kind::kNone: return "null";
    case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return key.repr();
    case Value::Kind::kFloat: {
      double d = key.as_double();
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
      return key.repr();
    }
    default: throw EvalError(fmt::format("keys must be str, int, float, bool or None, not {}", key.type_name()));
  }
}

struct JsonStyle {
  int indent;
  std::string item_separator;
  std::string key_separator;
};

void append_json(std::string& out, const Value& value, const JsonStyle& style, int depth) {
  int indent = style.indent;
  if (depth > kMaxNestingDepth) throw EvalError("tojson: value nested too deeply");
  auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (value.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += value.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += value.repr(); return;
    case Value::Kind::kFloat: {
      double d = value.as_double();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(d);
      }
      return;
    }
    case Value::Kind::kString: append_json_string(out, value.as_string()); return;
    case Value::Kind::kList: {
      if (value.is_dict_view()) {
        throw EvalError(fmt::format("Object of type {} is not JSON serializable", value.type_name()));
      }
      const auto& list = value.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) out += style.item_separator;
        if (indent >= 0) newline(depth + 1);
        append_json(out, list[i], style, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kMap: {
      const auto& entries = value.as_map().entries();
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += style.item_separator;
        if (indent >= 0) newline(depth + 1);
        append_json_string(out, json_key(entries[i].first));
        out += style.key_separator;
        append_json(out, entries[i].second, style, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kFunction:
      throw EvalError(fmt::format("Object of type {} is not JSON serializable", value.type_name()));
  }
}

}  // namespace

std::string Value::to_json_text(int indent, const std::pair<std::string, std::string>* separators) const {
  JsonStyle style{indent, indent >= 0 ? "," : ", ", ": "};
  if (separators) {
    style.item_separator = separators->first;
    style.key_separator = separators->second;
  }
  std::string out;
  append_json(out, *this, style, 0);
  return out;
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
    case Kind::kFunction: return nullptr;
    case Kind::kBool: return as_bool();
    case Kind::kInt:
      if (is_big_int()) return nlohmann::ordered_json::parse(repr());  // nlohmann keeps what fits, else a double
      return as_int();
    case Kind::kFloat: return as_double();
    case Kind::kString: return as_string();
    case Kind::kList: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& item : as_list()) out.push_back(item.to_json());
      return out;
    }
    case Kind::kMap: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [key, value] : as_map().entries()) out[json_key(key)] = value.to_json();
      return out;
    }
  }
  return nullptr;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList:
      switch (sequence_) {
        case Sequence::kList: return "list";
        case Sequence::kTuple: return "tuple";
        case Sequence::kGroupTuple: return "_GroupTuple";
        case Sequence::kDictKeys: return "dict_keys";
        case Sequence::kDictValues: return "dict_values";
        case Sequence::kDictItems: return "dict_items";
      }
      return "list";
    case Kind::kMap: return is_namespace() ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "?";
}

namespace {

bool is_numeric(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }

}  // namespace

bool values_equal(const Value& a, const Value& b) {
  if (is_numeric(a) && is_numeric(b)) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    if (a.is_big_int() || b.is_big_int()) return BigInt::compare(a.as_big_int(), b.as_big_int()) == 0;
    auto as_integer = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
    return as_integer(a) == as_integer(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kMap: {
      const auto& x = a.as_map();
      const auto& y = b.as_map();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !values_equal(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  if (is_numeric(a) && is_numeric(b)) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    if (a.is_big_int() || b.is_big_int()) return BigInt::compare(a.as_big_int(), b.as_big_int()) < 0;
    auto as_integer = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
    return as_integer(a) < as_integer(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 keeps code point order
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw EvalError(
      fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

}  // namespace tern::chat
