#include "chat/python_format.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string_view>

#include "chat/python_string.h"
#include "chat/template_builtins.h"

namespace tern::chat {
namespace {

// [[fill]align][sign][#][0][width][grouping][.precision][type]
struct FormatSpec {
  char32_t fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 for the type's default
  char sign = '-';
  bool alternate = false;
  int64_t width = 0;
  char grouping = 0;  // ',' or '_'
  int64_t precision = -1;
  char type = 0;
};

bool is_align(char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; }

int64_t parse_number(const std::u32string& spec, size_t& i) {
  int64_t value = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    value = value * 10 + (spec[i++] - '0');
    if (value > 1'000'000) throw EvalError("Too many decimal digits in format string");
  }
  return value;
}

FormatSpec parse_spec(const std::string& text) {
  std::u32string spec = decode_utf8(text);
  FormatSpec out;
  size_t i = 0;
  if (spec.size() >= 2 && is_align(spec[1])) {
    out.fill = spec[0];
    out.align = static_cast<char>(spec[1]);
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    out.align = static_cast<char>(spec[0]);
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) out.sign = static_cast<char>(spec[i++]);
  if (i < spec.size() && spec[i] == '#') {
    out.alternate = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (!out.align) {
      out.fill = '0';
      out.align = '=';
    }
    ++i;
  }
  out.width = parse_number(spec, i);
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) out.grouping = static_cast<char>(spec[i++]);
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9') throw EvalError("Format specifier missing precision");
    out.precision = parse_number(spec, i);
  }
  if (i < spec.size()) out.type = static_cast<char>(spec[i++]);
  if (i < spec.size() || (out.type && spec[i - 1] > 0x7F)) throw EvalError("Invalid format specifier");
  return out;
}

// Pads `body` (sign and prefix apart, for '=' alignment) to the spec's width.
std::string pad(const std::string& sign_and_prefix, const std::string& body, const FormatSpec& spec, char default_align) {
  char align = spec.align ? spec.align : default_align;
  std::string text = sign_and_prefix + body;
  auto len = static_cast<int64_t>(count_code_points(text));
  if (spec.width <= len) return text;
  std::string fill = encode_utf8(std::u32string(static_cast<size_t>(spec.width - len), spec.fill));
  if (align == '=') return sign_and_prefix + fill + body;
  if (align == '<') return text + fill;
  if (align == '>') return fill + text;
  return python_pad(text, spec.width, spec.fill, PadAlign::kCenter);
}

// Inserts `separator` every `group` digits of the leading run of digits of `digits`.
std::string group_digits(const std::string& digits, char separator, size_t group) {
  size_t end = 0;
  while (end < digits.size() && std::isxdigit(static_cast<unsigned char>(digits[end]))) ++end;
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    if (i > 0 && (end - i) % group == 0) out += separator;
    out += digits[i];
  }
  return out + digits.substr(end);
}

std::string sign_of(bool negative, char sign) {
  if (negative) return "-";
  if (sign == '+') return "+";
  if (sign == ' ') return " ";
  return "";
}

std::string format_float(double d, const FormatSpec& spec) {
  char type = spec.type;
  bool negative = std::signbit(d) && !std::isnan(d);
  double magnitude = std::fabs(d);
  std::string body;
  if (std::isnan(d) || std::isinf(d)) {
    body = std::isnan(d) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G') body = std::isnan(d) ? "NAN" : "INF";
    if (type == '%') body += '%';
  } else {
    int64_t precision = spec.precision < 0 ? 6 : spec.precision;
    switch (type) {
      case 'f':
      case 'F': body = fmt::format("{:.{}f}", magnitude, precision); break;
      case 'e':
      case 'E': body = fmt::format("{:.{}e}", magnitude, precision); break;
      case '%': body = fmt::format("{:.{}f}", magnitude * 100, precision) + "%"; break;
      case 'g':
      case 'G':
      case 'n':
        body = fmt::format("{:.{}g}", magnitude, precision == 0 ? 1 : precision);
        if (spec.alternate && body.find('.') == std::string::npos) body += '.';
        break;
      case 0:
        if (spec.precision < 0) {
          body = python_float_repr(magnitude);
        } else {
          // General format that keeps a digit after the point in fixed notation ('1.0', not '1').
          body = fmt::format("{:.{}g}", magnitude, precision == 0 ? 1 : precision);
          if (body.find_first_of(".e") == std::string::npos) body += ".0";
        }
        break;
      default:
        throw EvalError(fmt::format("Unknown format code '{}' for object of type 'float'", type));
    }
    if (type == 'E' || type == 'G') {
      for (char& c : body) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    if (spec.grouping) body = group_digits(body, spec.grouping, 3);
  }
  return pad(sign_of(negative, spec.sign), body, spec, '>');
}

std::string format_int(int64_t i, const FormatSpec& spec) {
  switch (spec.type) {
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
    case '%': return format_float(static_cast<double>(i), spec);
    default: break;
  }
  if (spec.precision >= 0) throw EvalError("Precision not allowed in integer format specifier");
  bool negative = i < 0;
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
  std::string body;
  std::string prefix;
  size_t group = 3;
  switch (spec.type) {
    case 0:
    case 'd':
    case 'n': body = std::to_string(magnitude); break;
    case 'b': body = fmt::format("{:b}", magnitude), prefix = "0b", group = 4; break;
    case 'o': body = fmt::format("{:o}", magnitude), prefix = "0o", group = 4; break;
    case 'x': body = fmt::format("{:x}", magnitude), prefix = "0x", group = 4; break;
    case 'X': body = fmt::format("{:X}", magnitude), prefix = "0X", group = 4; break;
    case 'c':
      if (i < 0 || i > 0x10FFFF) throw EvalError("%c arg not in range(0x110000)");
      return pad("", encode_utf8(std::u32string(1, static_cast<char32_t>(i))), spec, '<');
    default: throw EvalError(fmt::format("Unknown format code '{}' for object of type 'int'", spec.type));
  }
  if (spec.grouping) body = group_digits(body, spec.grouping, group);
  return pad(sign_of(negative, spec.sign) + (spec.alternate ? prefix : ""), body, spec, '>');
}

std::string format_string(const std::string& text, const FormatSpec& spec) {
  if (spec.type && spec.type != 's') throw EvalError(fmt::format("Unknown format code '{}' for object of type 'str'", spec.type));
  if (spec.sign != '-') throw EvalError("Sign not allowed in string format specifier");
  if (spec.align == '=') throw EvalError("'=' alignment not allowed in string format specifier");
  std::string body = text;
  if (spec.precision >= 0) {
    std::u32string code_points = decode_utf8(text);
    if (static_cast<int64_t>(code_points.size()) > spec.precision) {
      body = encode_utf8(code_points.substr(0, static_cast<size_t>(spec.precision)));
    }
  }
  return pad("", body, spec, '<');
}

int64_t integral_of(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }

// The value `args[index]` or `kwargs[name]` of a str.format field, then its `.attr` and `[key]` parts.
Value resolve_field(const std::string& field, const CallArgs& args, size_t& next_auto, int& numbering) {
  size_t end = field.find_first_of(".[");
  std::string first = field.substr(0, end);
  Value value;
  if (first.empty() || std::all_of(first.begin(), first.end(), ::isdigit)) {
    int mode = first.empty() ? 1 : 2;
    if (numbering != 0 && numbering != mode) {
      throw EvalError(mode == 1 ? "cannot switch from manual field specification to automatic field numbering"
                                : "cannot switch from automatic field numbering to manual field specification");
    }
    numbering = mode;
    size_t index = first.empty() ? next_auto++ : std::stoul(first);
    if (index >= args.positional.size()) {
      throw EvalError(fmt::format("Replacement index {} out of range for positional args tuple", index));
    }
    value = args.positional[index];
  } else {
    auto it = std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kw) { return kw.first == first; });
    if (it == args.keyword.end()) throw EvalError(fmt::format("'{}'", first));
    value = it->second;
  }
  size_t pos = end;
  while (pos != std::string::npos && pos < field.size()) {
    if (field[pos] == '.') {
      size_t next = field.find_first_of(".[", pos + 1);
      std::string name = field.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      if (name.empty()) throw EvalError("Empty attribute in format string");
      value = get_attribute(value, name);
      pos = next;
    } else {
      size_t close = field.find(']', pos);
      if (close == std::string::npos) throw EvalError("Missing ']' in format string");
      std::string key = field.substr(pos + 1, close - pos - 1);
      if (key.empty()) throw EvalError("Empty attribute in format string");
      bool is_index = std::all_of(key.begin(), key.end(), ::isdigit);
      value = get_item(value, is_index ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
      pos = close + 1;
      if (pos < field.size() && field[pos] != '.' && field[pos] != '[') {
        throw EvalError("Only '.' or '[' may follow ']' in format field specifier");
      }
    }
    if (value.is_undefined()) fail_undefined(value);
  }
  return value;
}

std::string ascii_repr(const std::string& repr) {
  std::string out;
  for (char32_t c : decode_utf8(repr)) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  return out;
}

}  // namespace

std::string format_value(const Value& value, const std::string& spec_text) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_string()) return format_string(value.as_string(), parse_spec(spec_text));
  if (value.is_big_int()) {
    FormatSpec spec = parse_spec(spec_text);
    if (std::string_view("eEfFgG%").find(spec.type) != std::string_view::npos && spec.type) {
      return format_float(value.as_double(), spec);
    }
    if (spec.type && spec.type != 'd' && spec.type != 'n') {
      throw EvalError(fmt::format("format code '{}' of an int beyond 64 bits is not supported", spec.type));
    }
    std::string digits = value.repr();
    bool negative = digits[0] == '-';
    if (negative) digits.erase(0, 1);
    if (spec.grouping) digits = group_digits(digits, spec.grouping, 3);
    return pad(sign_of(negative, spec.sign), digits, spec, '>');
  }
  if (value.is_int() || (value.is_bool() && !spec_text.empty())) return format_int(integral_of(value), parse_spec(spec_text));
  if (value.is_float()) return format_float(value.as_double(), parse_spec(spec_text));
  if (!spec_text.empty()) {
    throw EvalError(fmt::format("unsupported format string passed to {}.__format__", value.type_name()));
  }
  return value.to_str();
}

namespace {

// Python allows replacement fields inside a field's spec ("{:{width}}") two levels deep.
std::string str_format(const std::string& format, const CallArgs& args, int recursion_left) {
  if (recursion_left < 0) throw EvalError("Max string recursion exceeded");
  std::string out;
  size_t next_auto = 0;
  int numbering = 0;  // 0: none yet, 1: automatic, 2: manual
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw EvalError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // A field runs to its matching '}'; its spec may hold nested fields ("{:{width}}").
    size_t depth = 1;
    size_t end = i + 1;
    for (; end < format.size() && depth > 0; ++end) {
      if (format[end] == '{') ++depth;
      if (format[end] == '}') --depth;
    }
    if (depth > 0) throw EvalError("expected '}' before end of string");
    std::string field = format.substr(i + 1, end - i - 2);
    i = end - 1;
    size_t bracket = field.find('[');
    size_t colon = field.find(':', bracket == std::string::npos ? 0 : field.find(']', bracket));
    std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    std::string name_and_conversion = field.substr(0, colon);
    std::optional<char> conversion;
    size_t bang = name_and_conversion.find('!');
    if (bang != std::string::npos) {
      if (bang + 2 != name_and_conversion.size()) throw EvalError("expected ':' after conversion specifier");
      conversion = name_and_conversion[bang + 1];
      name_and_conversion.resize(bang);
    }
    Value value = resolve_field(name_and_conversion, args, next_auto, numbering);
    if (spec.find('{') != std::string::npos) spec = str_format(spec, args, recursion_left - 1);
    if (conversion) {
      switch (*conversion) {
        case 's': value = Value(value.to_str()); break;
        case 'r': value = Value(value.repr()); break;
        case 'a': value = Value(ascii_repr(value.repr())); break;
        default: throw EvalError(fmt::format("Unknown conversion specifier {}", *conversion));
      }
    }
    out += format_value(value, spec);
  }
  return out;
}

}  // namespace

std::string python_str_format(const std::string& format, const CallArgs& args) { return str_format(format, args, 2); }

std::string python_percent_format(const std::string& format, const Value& arguments) {
  ValueList positional = arguments.is_tuple() ? arguments.as_list() : ValueList{arguments};
  bool is_mapping = arguments.is_map() && !arguments.is_tuple();
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  auto next_value = [&]() -> const Value& {
    if (next_arg >= positional.size()) throw EvalError("not enough arguments for format string");
    return positional[next_arg++];
  };
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    auto at_end = [&] {
      if (i >= format.size()) throw EvalError("incomplete format");
    };
    ++i;
    at_end();
    std::optional<Value> keyed;
    if (format[i] == '(') {
      if (!is_mapping) throw EvalError("format requires a mapping");
      size_t close = format.find(')', i);
      if (close == std::string::npos) throw EvalError("incomplete format key");
      std::string key = format.substr(i + 1, close - i - 1);
      const Value* found = arguments.as_map().find(key);
      if (!found) throw EvalError(fmt::format("'{}'", key));
      keyed = *found;
      used_mapping = true;
      i = close + 1;
      at_end();
    }
    FormatSpec spec;
    spec.align = '>';
    for (; i < format.size(); ++i) {
      char flag = format[i];
      if (flag == '-') {
        spec.align = '<';
      } else if (flag == '0') {
        if (spec.align != '<') spec.fill = '0';
      } else if (flag == '+' || flag == ' ') {
        if (spec.sign != '+') spec.sign = flag;
      } else if (flag == '#') {
        spec.alternate = true;
      } else {
        break;
      }
    }
    at_end();
    if (format[i] == '*') {
      spec.width = int_argument(next_value(), "* wants int", 0);
      if (spec.width < 0) {
        spec.align = '<';
        spec.width = -spec.width;
      }
      ++i;
    } else {
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) spec.width = spec.width * 10 + (format[i++] - '0');
    }
    at_end();
    if (format[i] == '.') {
      ++i;
      spec.precision = 0;
      if (i < format.size() && format[i] == '*') {
        spec.precision = int_argument(next_value(), "* wants int", 0);
        ++i;
      } else {
        while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) spec.precision = spec.precision * 10 + (format[i++] - '0');
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    at_end();
    char conversion = format[i];
    if (conversion == '%') {
      out += '%';
      continue;
    }
    if (spec.fill == '0' && spec.align != '<') spec.align = '=';
    const Value arg = keyed ? *keyed : next_value();
    if (arg.is_undefined()) fail_undefined(arg);
    switch (conversion) {
      case 's':
      case 'r':
      case 'a': {
        std::string text = conversion == 's' ? arg.to_str() : conversion == 'r' ? arg.repr() : ascii_repr(arg.repr());
        FormatSpec text_spec = spec;
        text_spec.fill = ' ';
        if (text_spec.align == '=') text_spec.align = '>';
        text_spec.sign = '-';
        text_spec.type = 0;
        out += format_string(text, text_spec);
        break;
      }
      case 'c': {
        FormatSpec char_spec = spec;
        char_spec.fill = ' ';
        if (char_spec.align == '=') char_spec.align = '>';
        if (arg.is_string()) {
          if (count_code_points(arg.as_string()) != 1) throw EvalError("%c requires an int or a unicode character, not a string of length " + std::to_string(count_code_points(arg.as_string())));
          out += format_string(arg.as_string(), char_spec);
        } else if (arg.is_int() || arg.is_bool()) {
          char_spec.type = 'c';
          char_spec.precision = -1;
          out += format_int(integral_of(arg), char_spec);
        } else {
          throw EvalError(fmt::format("%c requires an int or a unicode character, not {}", arg.type_name()));
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        bool integer_only = conversion == 'o' || conversion == 'x' || conversion == 'X';
        if (!arg.is_int() && !arg.is_bool() && !(arg.is_float() && !integer_only)) {
          throw EvalError(fmt::format("%{} format: {} is required, not {}", conversion,
                                      integer_only ? "an integer" : "a real number", arg.type_name()));
        }
        FormatSpec int_spec = spec;
        int_spec.type = integer_only ? conversion : 'd';
        // %.3d pads the digits with zeros to the precision.
        int64_t digits_precision = int_spec.precision;
        int_spec.precision = -1;
        std::string text;
        Value whole = arg;
        if (arg.is_float()) {  // %d of a float is the int it truncates to, exactly
          double d = arg.as_double();
          if (!std::isfinite(d)) throw EvalError(fmt::format("cannot convert float {} to integer", python_float_repr(d)));
          whole = Value::integer(*BigInt::from_decimal(fmt::format("{:.0f}", std::trunc(d))));
        }
        if (whole.is_big_int()) {
          if (integer_only) throw EvalError(fmt::format("%{} of an int beyond 64 bits is not supported", conversion));
          text = format_value(whole, int_spec.sign == '-' ? "" : std::string(1, int_spec.sign));
        } else {
          int64_t value = integral_of(whole);
          text = format_int(value, FormatSpec{' ', 0, int_spec.sign, int_spec.alternate, 0, 0, -1, int_spec.type});
        }
        if (digits_precision > 0) {
          size_t body_start = text.find_first_of("0123456789abcdefABCDEF", (text[0] == '-' || text[0] == '+' || text[0] == ' ') ? 1 : 0);
          if (int_spec.alternate && int_spec.type != 'd') body_start += 2;
          auto body_len = static_cast<int64_t>(text.size() - body_start);
          if (body_len < digits_precision) text.insert(body_start, static_cast<size_t>(digits_precision - body_len), '0');
        }
        size_t sign_len = (text[0] == '-' || text[0] == '+' || text[0] == ' ') ? 1 : 0;
        if (int_spec.alternate && int_spec.type != 'd') sign_len += 2;
        out += pad(text.substr(0, sign_len), text.substr(sign_len), int_spec, '>');
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!arg.is_number() && !arg.is_bool()) {
          throw EvalError(fmt::format("must be real number, not {}", arg.type_name()));
        }
        FormatSpec float_spec = spec;
        float_spec.type = conversion;
        out += format_float(arg.as_double(), float_spec);
        break;
      }
      default:
        throw EvalError(fmt::format("unsupported format character '{}' (0x{:x}) at index {}", conversion,
                                    static_cast<unsigned char>(conversion), i));
    }
  }
  if (!is_mapping && next_arg < positional.size()) {
    throw EvalError("not all arguments converted during string formatting");
  }
  (void)used_mapping;
  return out;
}

}  // namespace tern::chat
