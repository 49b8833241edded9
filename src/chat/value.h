#pragma once
// The data model of the chat-template interpreter: a Python-like value as Jinja sees it.
// Jinja distinguishes `undefined` (a missing variable or key: prints as "", `is defined` is false) from `none`
// (Python's None), so this is a value type of its own rather than nlohmann::json, which has only null.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "chat/big_int.h"

namespace tern::chat {

class Value;
using ValueList = std::vector<Value>;

// A dict that keeps insertion order (Python dicts do, and tojson must too). Keys are strings as a rule, but dict
// literals may use any hashable value (`{0: 'a', none: 'b'}`); keys that Python hashes alike (1, 1.0 and true) are
// one key. Small dicts are searched; past kIndexedSize keys a hash index finds keys, because request objects (tools'
// parameters, chat_template_kwargs) can hold 100,000s of keys and a search per insertion would make building them
// quadratic.
class ValueMap {
 public:
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  // Throws EvalError for a key Python cannot hash (a list or a dict).
  const Value* find(const Value& key) const;
  const Value* find(const char* key) const { return find(std::string(key)); }
  void set(const std::string& key, Value value);
  void set(const char* key, Value value);
  void set(const Value& key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  static constexpr size_t kIndexedSize = 32;

  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;  // hash_key(key) -> position in entries_; empty below kIndexedSize
};

// Arguments of a call: `f(a, b, key=c)`.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Takes the argument `name` at `position` (positionally or by keyword); undefined if absent.
  Value get(size_t position, const std::string& name) const;
};

using NativeFunction = std::function<Value(const CallArgs&)>;

struct Function {
  std::string name;
  NativeFunction call;
};

// Thrown by value operations and builtins; the interpreter adds the template line and column.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& message) : std::runtime_error(message) {}
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kMap, kFunction };

  Value() = default;  // undefined
  Value(bool b) : data_(b) {}
  Value(int i) : data_(int64_t{i}) {}
  Value(int64_t i) : data_(i) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(ValueList list) : data_(std::make_shared<const ValueList>(std::move(list))) {}
  Value(ValueMap map) : data_(std::make_shared<ValueMap>(std::move(map))) {}

  static Value undefined(std::string name = {});
  static Value none();
  static Value function(std::string name, NativeFunction call);
  // A mutable map shared by reference: the one kind of object `{% set ns.attr = ... %}` may change.
  static Value namespace_object(ValueMap map);
  // A Python tuple: a list that prints as (a, b). Tuple literals, dict.items() pairs and varargs are tuples.
  static Value tuple(ValueList items);
  // An int of any size: int64 where it fits, else a big int (still of kind kInt).
  static Value integer(const BigInt& value);
  // What dict.keys(), .values() and .items() return: iterable like a list, printed as dict_keys([...]) and so on,
  // and, as in Python, neither subscriptable nor JSON serializable.
  enum class View : uint8_t { kKeys, kValues, kItems };
  static Value dict_view(ValueList items, View view);
  // What the groupby filter yields: a (grouper, list) tuple whose items are also its attributes.
  static Value group_tuple(Value grouper, ValueList items);

  // Throws tern::Error for JSON nested deeper than kMaxNestingDepth (core/nesting_limit.h).
  static Value from_json(const nlohmann::ordered_json& json);
  static Value from_json(const nlohmann::json& json);  // key order is lost: nlohmann::json sorts its keys

  Kind kind() const;
  bool is_big_int() const { return data_.index() == kBigIntIndex; }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_map() const { return kind() == Kind::kMap; }
  bool is_function() const { return kind() == Kind::kFunction; }
  bool is_namespace() const { return is_map() && is_namespace_; }
  bool is_tuple() const { return is_list() && (sequence_ == Sequence::kTuple || sequence_ == Sequence::kGroupTuple); }
  bool is_group_tuple() const { return is_list() && sequence_ == Sequence::kGroupTuple; }
  bool is_dict_view() const { return is_list() && sequence_ >= Sequence::kDictKeys; }
  // list + list and tuple + tuple concatenate; Python refuses other mixes.
  bool same_sequence_type(const Value& other) const { return sequence_ == other.sequence_; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // throws EvalError for a big int
  BigInt as_big_int() const;  // an int or bool of any size
  double as_double() const;  // int, float or bool as a double
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ValueList& as_list() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }
  const ValueMap& as_map() const { return *std::get<std::shared_ptr<ValueMap>>(data_); }
  ValueMap& namespace_map() const;  // only for namespaces
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const std::string& undefined_name() const { return std::get<UndefinedTag>(data_).name; }

  // Python truthiness: undefined, none, false, 0, "", [] and {} are false.
  bool truthy() const;
  // Python's str(): what `{{ value }}` prints ("" for undefined, "None", "True", "[1, 'a']", ...).
  std::string to_str() const;
  // Python's repr(): strings quoted, as inside a printed list.
  std::string repr() const;
  // Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=separators); indent < 0 means None,
  // and separators default to (", ", ": "), or ("," ": ") with an indent, as Python's do.
  std::string to_json_text(int indent = -1, const std::pair<std::string, std::string>* separators = nullptr) const;
  nlohmann::ordered_json to_json() const;
  // Jinja's type name for error messages: "string", "list", "dict object", ...
  std::string type_name() const;

 private:
  struct UndefinedTag {
    std::string name;
  };
  struct NoneTag {};
  // The alternatives in Kind's order, then big ints (kind kInt).
  std::variant<UndefinedTag, NoneTag, bool, int64_t, double, std::string, std::shared_ptr<const ValueList>,
               std::shared_ptr<ValueMap>, std::shared_ptr<const Function>, std::shared_ptr<const BigInt>>
      data_;
  static constexpr size_t kBigIntIndex = 9;
  enum class Sequence : uint8_t { kList, kTuple, kGroupTuple, kDictKeys, kDictValues, kDictItems };
  bool is_namespace_ = false;
  Sequence sequence_ = Sequence::kList;
};

// Python ==: numbers compare by value across int/float/bool, containers element-wise, other kinds never equal.
bool values_equal(const Value& a, const Value& b);
// Python <: numbers, strings (by code point) and lists; other pairs are a TypeError (thrown as EvalError).
bool value_less(const Value& a, const Value& b);
// Python's hash equality as text: equal keys (1, 1.0, true) give equal strings, and distinct ones distinct strings.
// Throws EvalError for unhashable values (lists, dicts), as Python's TypeError.
std::string hash_key(const Value& key);
// Python's repr() of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string python_float_repr(double d);

}  // namespace tern::chat
