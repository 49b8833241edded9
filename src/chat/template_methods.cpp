// Methods of Python's str, dict and list that chat templates call (`content.strip()`, `message.get('x')`...).
// Hugging Face renders in an ImmutableSandboxedEnvironment, so mutating methods (append, update...) are refused.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "chat/python_format.h"
#include "chat/python_string.h"
#include "chat/template_builtins.h"

namespace tern::chat {
namespace {

std::optional<std::string> optional_string(const Value& value, const std::string& what) {
  if (value.is_undefined() || value.is_none()) return std::nullopt;
  return string_argument(value, what);
}

// startswith/endswith take a string or a tuple of strings.
bool affix_matches(const std::string& text, const Value& affixes, bool at_start) {
  auto matches = [&](const Value& affix) {
    const std::string& a = string_argument(affix, at_start ? "startswith() argument" : "endswith() argument");
    if (a.size() > text.size()) return false;
    return at_start ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (affixes.is_list()) return std::any_of(affixes.as_list().begin(), affixes.as_list().end(), matches);
  return matches(affixes);
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList out;
  for (const auto& part : parts) out.emplace_back(part);
  return Value(std::move(out));
}

template <typename Predicate>
bool all_code_points(const std::string& text, Predicate predicate) {
  std::u32string code_points = decode_utf8(text);
  return !code_points.empty() && std::all_of(code_points.begin(), code_points.end(), predicate);
}

Value string_method(const std::string& text, const std::string& name, const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(python_strip(text, optional_string(args.get(0, "chars"), name + "() argument"), name != "rstrip",
                              name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto sep = optional_string(args.get(0, "sep"), "separator");
    if (sep && sep->empty()) throw EvalError("empty separator");
    int64_t maxsplit = int_argument(args.get(1, "maxsplit"), "maxsplit", -1);
    return string_list(name == "split" ? python_split(text, sep, maxsplit) : python_rsplit(text, sep, maxsplit));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines = python_split(text, std::string("\n"), -1);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return string_list(lines);
  }
  if (name == "startswith" || name == "endswith") {
    Value affix = args.get(0, "prefix");
    if (affix.is_undefined()) throw EvalError(name + "() takes at least 1 argument");
    return Value(affix_matches(text, affix, name == "startswith"));
  }
  if (name == "upper") return Value(python_upper(text));
  if (name == "casefold") return Value(python_casefold(text));
  if (name == "swapcase") return Value(python_swapcase(text));
  if (name == "format") return Value(python_str_format(text, args));
  if (name == "zfill") return Value(python_zfill(text, int_argument(args.get(0, "width"), "zfill() width", 0)));
  if (name == "ljust" || name == "rjust" || name == "center") {
    Value width = args.get(0, "width");
    if (width.is_undefined()) throw EvalError(fmt::format("{}() takes at least 1 argument (0 given)", name));
    Value fill = args.get(1, "fillchar");
    std::u32string fill_char = fill.is_undefined() ? U" " : decode_utf8(string_argument(fill, name + "() fillchar"));
    if (fill_char.size() != 1) throw EvalError("The fill character must be exactly one character long");
    PadAlign align = name == "ljust" ? PadAlign::kLeft : name == "rjust" ? PadAlign::kRight : PadAlign::kCenter;
    return Value(python_pad(text, int_argument(width, name + "() width", 0), fill_char[0], align));
  }
  if (name == "partition" || name == "rpartition") {
    std::string sep = string_argument(args.get(0, "sep"), name + "() separator");
    if (sep.empty()) throw EvalError("empty separator");
    size_t found = name == "partition" ? text.find(sep) : text.rfind(sep);
    if (found == std::string::npos) {
      return name == "partition" ? Value::tuple({Value(text), Value(""), Value("")})
                                 : Value::tuple({Value(""), Value(""), Value(text)});
    }
    return Value::tuple({Value(text.substr(0, found)), Value(sep), Value(text.substr(found + sep.size()))});
  }
  if (name == "lower") return Value(python_lower(text));
  if (name == "title") return Value(python_str_title(text));
  if (name == "capitalize") return Value(python_capitalize(text));
  if (name == "replace") {
    return Value(python_replace(text, string_argument(args.get(0, "old"), "replace() old"),
                                string_argument(args.get(1, "new"), "replace() new"),
                                int_argument(args.get(2, "count"), "replace() count", -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    int64_t found = python_find(text, string_argument(args.get(0, "sub"), name + "() argument"),
                                name == "rfind" || name == "rindex");
    if (found < 0 && (name == "index" || name == "rindex")) throw EvalError("substring not found");
    return Value(found);
  }
  if (name == "count") {
    std::string part = string_argument(args.get(0, "sub"), "count() argument");
    if (part.empty()) return Value(static_cast<int64_t>(count_code_points(text) + 1));
    int64_t count = 0;
    for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + part.size())) ++count;
    return Value(count);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& item : iterate_value(args.get(0, "iterable"))) {
      if (!first) out += text;
      first = false;
      out += string_argument(item, "join() item");
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string affix = string_argument(args.get(0, "affix"), name + "() argument");
    if (affix_matches(text, Value(affix), name == "removeprefix")) {
      return Value(name == "removeprefix" ? text.substr(affix.size()) : text.substr(0, text.size() - affix.size()));
    }
    return Value(text);
  }
  if (name == "isdigit") return Value(all_code_points(text, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isspace") return Value(all_code_points(text, is_python_space));
  if (name == "isalpha" || name == "isalnum") {
    bool alnum = name == "isalnum";
    return Value(all_code_points(text, [alnum](char32_t c) {
      std::string s = encode_utf8(std::u32string(1, c));
      return python_upper(s) != python_lower(s) || (alnum && c >= '0' && c <= '9');
    }));
  }
  if (name == "islower") return Value(python_lower(text) == text && python_upper(text) != text);
  if (name == "isupper") return Value(python_upper(text) == text && python_lower(text) != text);
  throw EvalError(fmt::format("'str' object has no attribute '{}'", name));
}

Value map_method(const ValueMap& map, const std::string& name, const CallArgs& args) {
  if (name == "items") {
    ValueList out;
    for (const auto& [key, value] : map.entries()) out.push_back(Value::tuple({key, value}));
    return Value::dict_view(std::move(out), Value::View::kItems);
  }
  if (name == "keys") {
    ValueList out;
    for (const auto& [key, unused] : map.entries()) out.push_back(key);
    return Value::dict_view(std::move(out), Value::View::kKeys);
  }
  if (name == "values") {
    ValueList out;
    for (const auto& [unused, value] : map.entries()) out.push_back(value);
    return Value::dict_view(std::move(out), Value::View::kValues);
  }
  // get
  Value key = args.get(0, "key");
  if (const Value* found = map.find(key)) return *found;
  Value fallback = args.get(1, "default");
  return fallback.is_undefined() ? Value::none() : fallback;
}

Value list_method(const ValueList& list, const std::string& name, const CallArgs& args) {
  Value item = args.get(0, "value");
  if (name == "count") {
    return Value(static_cast<int64_t>(
        std::count_if(list.begin(), list.end(), [&](const Value& v) { return values_equal(v, item); })));
  }
  for (size_t i = 0; i < list.size(); ++i) {  // index
    if (values_equal(list[i], item)) return Value(static_cast<int64_t>(i));
  }
  throw EvalError(fmt::format("{} is not in list", item.repr()));
}

bool is_string_method(const std::string& name) {
  static const char* const kNames[] = {"strip",   "lstrip",       "rstrip",       "split",    "rsplit",  "splitlines",
                                       "startswith", "endswith",  "upper",        "lower",    "title",   "capitalize",
                                       "replace", "find",         "rfind",        "index",    "rindex",  "count",
                                       "join",    "removeprefix", "removesuffix", "isdigit",  "isspace", "isalpha",
                                       "isalnum", "islower",      "isupper",      "casefold", "swapcase", "format",
                                       "zfill",   "ljust",        "rjust",        "center",   "partition", "rpartition"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool is_mutating_method(const std::string& name) {
  static const char* const kNames[] = {"append", "extend", "insert", "pop",        "remove",  "clear",
                                       "sort",   "reverse", "update", "setdefault", "popitem", "copy"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

}  // namespace

Value bound_method(const Value& object, const std::string& name) {
  std::string qualified = fmt::format("{}.{}", object.type_name(), name);
  if (object.is_string() && is_string_method(name)) {
    return Value::function(qualified, [text = object.as_string(), name](const CallArgs& args) {
      return string_method(text, name, args);
    });
  }
  if (object.is_map() && (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::function(qualified, [object, name](const CallArgs& args) {
      return map_method(object.as_map(), name, args);
    });
  }
  if (object.is_list() && (name == "index" || name == "count")) {
    return Value::function(qualified, [object, name](const CallArgs& args) {
      return list_method(object.as_list(), name, args);
    });
  }
  if ((object.is_list() || object.is_map()) && is_mutating_method(name)) {
    return Value::function(qualified, [qualified](const CallArgs&) -> Value {
      throw EvalError(fmt::format("{}() is not allowed: chat templates render in an immutable sandbox", qualified));
    });
  }
  return Value::undefined();
}

}  // namespace tern::chat
