// Global functions: Jinja's range, dict and namespace, and the two Hugging Face adds to chat templates,
// raise_exception(message) and strftime_now(format).
#include <fmt/format.h>

#include <ctime>

#include "chat/template_builtins.h"

namespace tern::chat {
namespace {

// range() beyond this is a runaway template, not a chat format.
constexpr int64_t kMaxRangeLength = 1 << 20;

Value range_function(const CallArgs& args) {
  if (!args.keyword.empty()) throw EvalError("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw EvalError(fmt::format("range expected 1 to 3 arguments, got {}", p.size()));
  int64_t start = p.size() == 1 ? 0 : int_argument(p[0], "range() start", 0);
  int64_t stop = int_argument(p.size() == 1 ? p[0] : p[1], "range() stop", 0);
  int64_t step = p.size() == 3 ? int_argument(p[2], "range() step", 1) : 1;
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRangeLength) {
      throw EvalError(fmt::format("range() longer than {} items", kMaxRangeLength));
    }
    out.emplace_back(i);
  }
  return Value(std::move(out));
}

ValueMap keyword_map(const CallArgs& args, const std::string& function) {
  ValueMap map;
  for (const auto& positional : args.positional) {
    if (!positional.is_map()) throw EvalError(fmt::format("{}() takes only a mapping positionally", function));
    for (const auto& [key, value] : positional.as_map().entries()) map.set(key, value);
  }
  for (const auto& [key, value] : args.keyword) map.set(key, value);
  return map;
}

}  // namespace

ValueMap builtin_globals() {
  ValueMap globals;
  globals.set("range", Value::function("range", range_function));
  globals.set("dict", Value::function("dict", [](const CallArgs& args) { return Value(keyword_map(args, "dict")); }));
  globals.set("namespace", Value::function("namespace", [](const CallArgs& args) {
                return Value::namespace_object(keyword_map(args, "namespace"));
              }));
  globals.set("raise_exception", Value::function("raise_exception", [](const CallArgs& args) -> Value {
                throw TemplateRaised(args.get(0, "message").to_str());
              }));
  globals.set("strftime_now", Value::function("strftime_now", [](const CallArgs& args) {
                std::string format = string_argument(args.get(0, "format"), "strftime_now() format");
                std::time_t now = std::time(nullptr);
                std::tm local{};
                localtime_r(&now, &local);
                char buffer[256];
                size_t len = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
                if (len == 0 && !format.empty()) throw EvalError("strftime_now(): formatted date is too long or empty");
                return Value(std::string(buffer, len));
              }));
  return globals;
}

}  // namespace tern::chat
