#include "cli/validators.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

namespace tern::cli {

namespace {

// A validator that reads the value as a number and passes it to `check`, which returns "" or what is wrong.
CLI::Validator numeric(const std::string& description, std::function<std::string(double)> check) {
  return CLI::Validator(
      [check = std::move(check)](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double number = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || std::isnan(number)) {
          return fmt::format("'{}' is not a number", value);
        }
        return check(number);
      },
      description);
}

}  // namespace

CLI::Validator non_negative() {
  return numeric("NONNEGATIVE", [](double number) {
    return number >= 0 ? std::string() : fmt::format("{} is negative (it takes 0 or more)", number);
  });
}

CLI::Validator positive() {
  return numeric("POSITIVE", [](double number) {
    return number > 0 ? std::string() : fmt::format("{} is not positive (it takes more than 0)", number);
  });
}

CLI::Validator between(double min, double max) {
  return numeric(fmt::format("FLOAT in [{} - {}]", min, max), [min, max](double number) {
    return number >= min && number <= max ? std::string()
                                          : fmt::format("{} is outside {} to {}", number, min, max);
  });
}

}  // namespace tern::cli
