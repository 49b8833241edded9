// Jinja's built-in filters as Hugging Face chat templates use them. `tojson` is Hugging Face's override:
// json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=False), without Jinja's HTML escaping.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>
#include <utility>

#include "chat/python_format.h"
#include "chat/python_string.h"
#include "chat/template_builtins.h"
#include "chat/template_text_filters.h"

namespace tern::chat {
namespace {

using Filter = std::function<Value(const Value& input, const CallArgs& args)>;

bool bool_argument(const Value& value, bool fallback) { return value.is_undefined() ? fallback : value.truthy(); }

// Jinja's soft_str: filters that work on text accept any value and print it.
std::string text_of(const Value& value) { return value.to_str(); }

// `attribute` arguments may be dotted ("function.name") and are looked up item-first like `obj[key]`.
Value lookup_attribute(const Value& item, const std::string& attribute) {
  Value current = item;
  size_t start = 0;
  while (true) {
    size_t dot = attribute.find('.', start);
    std::string part = attribute.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_undefined()) return current;
    bool is_index = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = is_index ? get_item(current, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(current, Value(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

ValueList as_list(const Value& input) { return iterate_value(input); }

CallArgs shifted(const CallArgs& args, size_t first) {
  CallArgs out;
  for (size_t i = first; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.keyword = args.keyword;
  return out;
}

// select / reject / selectattr / rejectattr. Like map, they yield nothing for a false input (None, "", []).
Value select_items(const Value& input, const CallArgs& args, bool by_attribute, bool keep_matches) {
  if (!input.truthy()) return Value(ValueList{});
  size_t first_test_arg = by_attribute ? 1 : 0;
  std::string attribute = by_attribute ? string_argument(args.get(0, "attribute"), "attribute") : "";
  bool has_test = args.positional.size() > first_test_arg;
  std::string test = has_test ? string_argument(args.positional[first_test_arg], "test name") : "";
  CallArgs test_args = shifted(args, first_test_arg + 1);
  ValueList out;
  for (const auto& item : as_list(input)) {
    Value subject = by_attribute ? lookup_attribute(item, attribute) : item;
    bool passes = has_test ? apply_test(test, subject, test_args) : subject.truthy();
    if (passes == keep_matches) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_items(const Value& input, const CallArgs& args) {
  ValueList out;
  if (!input.truthy()) return Value(std::move(out));
  Value attribute;
  Value fallback;
  for (const auto& [key, value] : args.keyword) {
    if (key == "attribute") attribute = value;
    if (key == "default") fallback = value;
  }
  if (!attribute.is_undefined()) {
    std::string name = attribute.is_string() ? attribute.as_string() : attribute.to_str();
    for (const auto& item : as_list(input)) {
      Value v = lookup_attribute(item, name);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value(std::move(out));
  }
  std::string filter = string_argument(args.get(0, "filter"), "map() filter name");
  CallArgs filter_args = shifted(args, 1);
  for (const auto& item : as_list(input)) out.push_back(apply_filter(filter, item, filter_args));
  return Value(std::move(out));
}

// Sort key for sort/unique/min/max/dictsort: strings compare case-insensitively unless case_sensitive.
Value sort_key(const Value& item, const std::string& attribute, bool case_sensitive) {
  Value key = attribute.empty() ? item : lookup_attribute(item, attribute);
  if (!case_sensitive && key.is_string()) return Value(python_lower(key.as_string()));
  return key;
}

std::string string_or_empty(const Value& value) { return value.is_undefined() || value.is_none() ? "" : value.to_str(); }

Value sort_filter(const Value& input, const CallArgs& args) {
  bool reverse = bool_argument(args.get(0, "reverse"), false);
  bool case_sensitive = bool_argument(args.get(1, "case_sensitive"), false);
  std::string attribute = string_or_empty(args.get(2, "attribute"));
  ValueList items = as_list(input);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(sort_key(item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? value_less(y.first, x.first) : value_less(x.first, y.first);
  });
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(item);
  return Value(std::move(out));
}

Value min_max(const Value& input, const CallArgs& args, bool want_max) {
  bool case_sensitive = bool_argument(args.get(0, "case_sensitive"), false);
  std::string attribute = string_or_empty(args.get(1, "attribute"));
  ValueList items = as_list(input);
  if (items.empty()) return Value::undefined("no aggregated item, sequence was empty");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value a = sort_key(items[i], attribute, case_sensitive);
    Value b = sort_key(items[best], attribute, case_sensitive);
    if (want_max ? value_less(b, a) : value_less(a, b)) best = i;
  }
  return items[best];
}

Value batch_filter(const Value& input, const CallArgs& args) {
  int64_t size = int_argument(args.get(0, "linecount"), "batch() linecount", 0);
  if (size <= 0) throw EvalError(fmt::format("batch() linecount must be positive, got {}", size));
  Value fill = args.get(1, "fill_with");
  ValueList batches;
  ValueList current;
  for (auto& item : as_list(input)) {
    if (static_cast<int64_t>(current.size()) == size) batches.emplace_back(std::exchange(current, {}));
    current.push_back(std::move(item));
  }
  if (!current.empty()) {
    if (!fill.is_undefined() && !fill.is_none()) current.resize(static_cast<size_t>(size), fill);
    batches.emplace_back(std::move(current));
  }
  return Value(std::move(batches));
}

// slice(n): n columns, the first len % n of them one item longer (filled up with `fill_with` otherwise).
Value slice_filter(const Value& input, const CallArgs& args) {
  int64_t slices = int_argument(args.get(0, "slices"), "slice() slices", 0);
  if (slices <= 0) throw EvalError(slices == 0 ? "integer division or modulo by zero" : "slice() slices must be positive");
  Value fill = args.get(1, "fill_with");
  ValueList items = as_list(input);
  auto length = static_cast<int64_t>(items.size());
  int64_t per_slice = length / slices;
  int64_t with_extra = length % slices;
  int64_t offset = 0;
  ValueList out;
  for (int64_t n = 0; n < slices; ++n) {
    int64_t start = offset + n * per_slice;
    if (n < with_extra) ++offset;
    int64_t end = offset + (n + 1) * per_slice;
    ValueList column(items.begin() + start, items.begin() + end);
    if (!fill.is_undefined() && !fill.is_none() && n >= with_extra) column.push_back(fill);
    out.emplace_back(std::move(column));
  }
  return Value(std::move(out));
}

// groupby(attribute): (grouper, items) pairs in the order of the sorted keys, as Jinja's sort-then-group does.
Value groupby_filter(const Value& input, const CallArgs& args) {
  Value attribute = args.get(0, "attribute");
  Value fallback = args.get(1, "default");
  bool case_sensitive = bool_argument(args.get(2, "case_sensitive"), false);
  auto key_of = [&](const Value& item, bool fold_case) {
    Value key = attribute.is_int() ? get_item(item, attribute) : lookup_attribute(item, string_argument(attribute, "groupby() attribute"));
    if (key.is_undefined() && !fallback.is_undefined()) key = fallback;
    return fold_case && key.is_string() ? Value(python_lower(key.as_string())) : key;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : as_list(input)) keyed.emplace_back(key_of(item, !case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return value_less(a.first, b.first); });
  ValueList groups;
  for (size_t i = 0; i < keyed.size();) {
    ValueList members;
    size_t j = i;
    for (; j < keyed.size() && values_equal(keyed[j].first, keyed[i].first); ++j) members.push_back(keyed[j].second);
    // The grouper is the first member's own value, not its case-folded key.
    Value grouper = case_sensitive ? keyed[i].first : key_of(members.front(), false);
    groups.push_back(Value::group_tuple(std::move(grouper), std::move(members)));
    i = j;
  }
  return Value(std::move(groups));
}

Value round_filter(const Value& input, const CallArgs& args) {
  int64_t precision = int_argument(args.get(0, "precision"), "round() precision", 0);
  Value method_value = args.get(1, "method");
  std::string method = method_value.is_undefined() ? "common" : string_argument(method_value, "round() method");
  if (input.is_int() && method == "common") return input;
  double x = input.as_double();
  if (method == "floor" || method == "ceil") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    return Value((method == "floor" ? std::floor(x * scale) : std::ceil(x * scale)) / scale);
  }
  if (method != "common") throw EvalError("round() method must be 'common', 'ceil' or 'floor'");
  if (precision == 0) return Value(std::nearbyint(x));  // ties to even, like Python's round()
  // Python rounds the exact binary value to `precision` decimals, as correctly rounded formatting does.
  if (precision < 0 || precision > 300) return Value(x);
  return Value(std::stod(fmt::format("{:.{}f}", x, precision)));
}

Value int_filter(const Value& input, const CallArgs& args) {
  Value fallback = args.get(0, "default");
  Value result_on_error = fallback.is_undefined() ? Value(0) : fallback;
  if (input.is_int()) return input;
  if (input.is_bool()) return Value(int64_t{input.as_bool()});
  if (input.is_float()) {
    double d = input.as_double();
    if (!std::isfinite(d)) return result_on_error;
    if (std::fabs(d) > 9.2e18) return Value::integer(*BigInt::from_decimal(fmt::format("{:.0f}", std::trunc(d))));
    return Value(static_cast<int64_t>(d));
  }
  if (input.is_string()) {
    std::string text = python_strip(input.as_string(), std::nullopt, true, true);
    int64_t base = int_argument(args.get(1, "base"), "int() base", 10);
    try {
      size_t used = 0;
      int64_t value = std::stoll(text, &used, static_cast<int>(base));
      if (used == text.size()) return Value(value);
    } catch (const std::out_of_range&) {
      if (base == 10) {
        if (auto big = BigInt::from_decimal(text)) return Value::integer(*big);
      }
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      double value = std::stod(text, &used);
      if (used == text.size() && std::isfinite(value)) return int_filter(Value(value), args);
    } catch (const std::exception&) {
    }
  }
  return result_on_error;
}

Value float_filter(const Value& input, const CallArgs& args) {
  Value fallback = args.get(0, "default");
  Value result_on_error = fallback.is_undefined() ? Value(0.0) : fallback;
  if (input.is_number() || input.is_bool()) return Value(input.as_double());
  if (input.is_string()) {
    std::string text = python_strip(input.as_string(), std::nullopt, true, true);
    try {
      size_t used = 0;
      double value = std::stod(text, &used);
      if (used == text.size()) return Value(value);
    } catch (const std::exception&) {
    }
  }
  return result_on_error;
}

Value indent_filter(const Value& input, const CallArgs& args) {
  Value width_value = args.get(0, "width");
  std::string indentation =
      width_value.is_string() ? width_value.as_string()
                              : std::string(static_cast<size_t>(std::max<int64_t>(0, int_argument(width_value, "indent() width", 4))), ' ');
  bool first = bool_argument(args.get(1, "first"), false);
  bool blank = bool_argument(args.get(2, "blank"), false);
  std::string text = text_of(input);
  std::vector<std::string> lines = python_split(text, std::string("\n"), -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    // Jinja indents the first line only with `first`, and other lines unless they are empty (or `blank`).
    bool indent_line = i == 0 ? first : (blank || !lines[i].empty());
    if (indent_line) out += indentation;
    out += lines[i];
  }
  return Value(std::move(out));
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value ascii_json(const std::string& json) {
  // ensure_ascii=True: every non-ASCII code point as \uXXXX (UTF-16 surrogate pairs above the BMP).
  std::string out;
  for (char32_t c : decode_utf8(json)) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      char32_t v = c - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                         static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    }
  }
  return Value(std::move(out));
}

Value sorted_keys(const Value& value) {
  if (value.is_list()) {
    ValueList out;
    for (const auto& item : value.as_list()) out.push_back(sorted_keys(item));
    return Value(std::move(out));
  }
  if (!value.is_map()) return value;
  auto entries = value.as_map().entries();
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return value_less(a.first, b.first); });
  ValueMap out;
  for (auto& [key, item] : entries) out.set(key, sorted_keys(item));
  return Value(std::move(out));
}

// Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value tojson_filter(const Value& input, const CallArgs& args) {
  bool ensure_ascii = bool_argument(args.get(0, "ensure_ascii"), false);
  auto indent = static_cast<int>(int_argument(args.get(1, "indent"), "tojson() indent", -1));
  Value separators_value = args.get(2, "separators");
  std::pair<std::string, std::string> separators;
  bool has_separators = !separators_value.is_undefined() && !separators_value.is_none();
  if (has_separators) {
    if (!separators_value.is_list() || separators_value.as_list().size() != 2) {
      throw EvalError("tojson() separators must be a pair of strings");
    }
    separators = {string_argument(separators_value.as_list()[0], "tojson() item separator"),
                  string_argument(separators_value.as_list()[1], "tojson() key separator")};
  }
  bool sort_keys = bool_argument(args.get(3, "sort_keys"), false);
  std::string json = (sort_keys ? sorted_keys(input) : input).to_json_text(indent, has_separators ? &separators : nullptr);
  return ensure_ascii ? ascii_json(json) : Value(std::move(json));
}

Value length_of(const Value& input) {
  switch (input.kind()) {
    case Value::Kind::kUndefined: return Value(0);
    case Value::Kind::kString: return Value(static_cast<int64_t>(count_code_points(input.as_string())));
    case Value::Kind::kList: return Value(static_cast<int64_t>(input.as_list().size()));
    case Value::Kind::kMap: return Value(static_cast<int64_t>(input.as_map().size()));
    default: throw EvalError(fmt::format("object of type '{}' has no len()", input.type_name()));
  }
}

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> kFilters = [] {
    std::unordered_map<std::string, Filter> f;
    f["trim"] = [](const Value& in, const CallArgs& args) {
      Value chars = args.get(0, "chars");
      return Value(python_strip(text_of(in), chars.is_undefined() || chars.is_none() ? std::nullopt : std::optional(chars.to_str()), true, true));
    };
    f["tojson"] = tojson_filter;
    f["length"] = [](const Value& in, const CallArgs&) { return length_of(in); };
    f["count"] = f["length"];
    f["items"] = [](const Value& in, const CallArgs&) -> Value {
      if (in.is_undefined()) return Value(ValueList{});
      if (!in.is_map()) throw EvalError("can only get item pairs from a mapping");
      return bound_method(in, "items").as_function().call(CallArgs{});
    };
    f["selectattr"] = [](const Value& in, const CallArgs& args) { return select_items(in, args, true, true); };
    f["rejectattr"] = [](const Value& in, const CallArgs& args) { return select_items(in, args, true, false); };
    f["select"] = [](const Value& in, const CallArgs& args) { return select_items(in, args, false, true); };
    f["reject"] = [](const Value& in, const CallArgs& args) { return select_items(in, args, false, false); };
    f["map"] = map_items;
    f["join"] = [](const Value& in, const CallArgs& args) {
      Value separator = args.get(0, "d");
      std::string attribute = string_or_empty(args.get(1, "attribute"));
      std::string out;
      bool first = true;
      for (const auto& item : as_list(in)) {
        if (!first) out += separator.is_undefined() ? "" : separator.to_str();
        first = false;
        out += (attribute.empty() ? item : lookup_attribute(item, attribute)).to_str();
      }
      return Value(std::move(out));
    };
    f["default"] = [](const Value& in, const CallArgs& args) {
      Value fallback = args.get(0, "default_value");
      bool boolean = bool_argument(args.get(1, "boolean"), false);
      if (in.is_undefined() || (boolean && !in.truthy())) return fallback.is_undefined() ? Value("") : fallback;
      return in;
    };
    f["d"] = f["default"];
    f["first"] = [](const Value& in, const CallArgs&) {
      ValueList items = as_list(in);
      return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
    };
    f["last"] = [](const Value& in, const CallArgs&) {
      ValueList items = as_list(in);
      return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
    };
    f["list"] = [](const Value& in, const CallArgs&) { return Value(as_list(in)); };
    f["string"] = [](const Value& in, const CallArgs&) { return Value(text_of(in)); };
    f["int"] = int_filter;
    f["float"] = float_filter;
    f["upper"] = [](const Value& in, const CallArgs&) { return Value(python_upper(text_of(in))); };
    f["lower"] = [](const Value& in, const CallArgs&) { return Value(python_lower(text_of(in))); };
    f["capitalize"] = [](const Value& in, const CallArgs&) { return Value(python_capitalize(text_of(in))); };
    f["title"] = [](const Value& in, const CallArgs&) { return Value(jinja_title(text_of(in))); };
    f["replace"] = [](const Value& in, const CallArgs& args) {
      return Value(python_replace(text_of(in), args.get(0, "old").to_str(), args.get(1, "new").to_str(),
                                  int_argument(args.get(2, "count"), "replace() count", -1)));
    };
    f["safe"] = [](const Value& in, const CallArgs&) { return in; };
    f["escape"] = [](const Value& in, const CallArgs&) { return Value(html_escape(text_of(in))); };
    f["e"] = f["escape"];
    f["unique"] = [](const Value& in, const CallArgs& args) {
      bool case_sensitive = bool_argument(args.get(0, "case_sensitive"), false);
      std::string attribute = string_or_empty(args.get(1, "attribute"));
      ValueList out;
      ValueList seen;
      for (const auto& item : as_list(in)) {
        Value key = sort_key(item, attribute, case_sensitive);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value(std::move(out));
    };
    f["reverse"] = [](const Value& in, const CallArgs&) {
      if (in.is_string()) return slice_value(in, Value(), Value(), Value(-1));
      ValueList items = as_list(in);
      std::reverse(items.begin(), items.end());
      return Value(std::move(items));
    };
    f["sort"] = sort_filter;
    f["dictsort"] = [](const Value& in, const CallArgs& args) {
      if (!in.is_map()) throw EvalError("dictsort: expected a mapping");
      bool case_sensitive = bool_argument(args.get(0, "case_sensitive"), false);
      Value by = args.get(1, "by");
      bool by_value = !by.is_undefined() && by.to_str() == "value";
      CallArgs sort_args;
      sort_args.keyword = {{"reverse", args.get(2, "reverse")},
                           {"case_sensitive", Value(case_sensitive)},
                           {"attribute", Value(by_value ? "1" : "0")}};
      return sort_filter(bound_method(in, "items").as_function().call(CallArgs{}), sort_args);
    };
    f["abs"] = [](const Value& in, const CallArgs&) {
      if (in.is_int()) return value_less(in, Value(0)) ? unary_minus(in) : in;
      if (in.is_float()) return Value(std::fabs(in.as_double()));
      throw EvalError(fmt::format("bad operand type for abs(): '{}'", in.type_name()));
    };
    f["round"] = round_filter;
    f["wordcount"] = [](const Value& in, const CallArgs&) {
      return Value(static_cast<int64_t>(python_split(text_of(in), std::nullopt, -1).size()));
    };
    f["indent"] = indent_filter;
    f["sum"] = [](const Value& in, const CallArgs& args) {
      std::string attribute = string_or_empty(args.get(0, "attribute"));
      Value total = args.get(1, "start");
      if (total.is_undefined()) total = Value(0);
      for (const auto& item : as_list(in)) {
        total = binary_operator("+", total, attribute.empty() ? item : lookup_attribute(item, attribute));
      }
      return total;
    };
    f["min"] = [](const Value& in, const CallArgs& args) { return min_max(in, args, false); };
    f["max"] = [](const Value& in, const CallArgs& args) { return min_max(in, args, true); };
    f["attr"] = [](const Value& in, const CallArgs& args) {
      return get_attribute(in, string_argument(args.get(0, "name"), "attr() name"));
    };
    f["format"] = [](const Value& in, const CallArgs& args) {
      if (!args.positional.empty() && !args.keyword.empty()) {
        throw EvalError("can't handle positional and keyword arguments at the same time");
      }
      ValueMap mapping;
      for (const auto& [key, value] : args.keyword) mapping.set(key, value);
      Value arguments = args.keyword.empty() ? Value::tuple(args.positional) : Value(std::move(mapping));
      return Value(python_percent_format(text_of(in), arguments));
    };
    f["batch"] = batch_filter;
    f["slice"] = slice_filter;
    f["groupby"] = groupby_filter;
    f["truncate"] = truncate_filter;
    f["wordwrap"] = wordwrap_filter;
    f["striptags"] = striptags_filter;
    f["urlencode"] = urlencode_filter;
    f["pprint"] = pprint_filter;
    f["center"] = [](const Value& in, const CallArgs& args) {
      return Value(python_pad(text_of(in), int_argument(args.get(0, "width"), "center() width", 80), U' ', PadAlign::kCenter));
    };
    return f;
  }();
  return kFilters;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw EvalError(fmt::format("no filter named '{}'", name));
  return it->second(input, args);
}

}  // namespace tern::chat
