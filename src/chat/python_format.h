#pragma once
// Python's string formatting as chat templates reach it: format(value, spec) with the format mini-language,
// str.format (`'{} {name:>8}'.format(...)`) and the % operator (`'%s: %05.2f' % (a, b)`, `'%(key)s' % mapping`).
// Errors are EvalErrors carrying Python's messages. Not covered: binary, octal and hex digits of ints beyond 64 bits
// (an error says so).
#include <string>

#include "chat/value.h"

namespace tern::chat {

// format(value, spec), e.g. spec ">10", "+.3f", "#x", "_d", "08.2%".
std::string format_value(const Value& value, const std::string& spec);
// str.format(*args, **kwargs). Attribute and item lookups in field names go through `lookup` (Jinja's sandboxed
// getattr), as the sandbox's formatter does.
std::string python_str_format(const std::string& format, const CallArgs& args);
// format % arguments: a tuple supplies one value per conversion, a mapping supplies `%(key)s` conversions, any
// other value is the single argument.
std::string python_percent_format(const std::string& format, const Value& arguments);

}  // namespace tern::chat
