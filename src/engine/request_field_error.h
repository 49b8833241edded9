#pragma once
// A request the engine refuses because of one of its fields. `field` names the field as GenerateRequest spells it
// ("top_p", "logit_bias", "stop_token_ids", "prompt_token_ids", ...), so that a front end can tell its client which
// parameter was wrong instead of blaming the prompt.
#include <string>
#include <utility>

#include "core/error.h"

namespace tern {

class RequestFieldError : public Error {
 public:
  RequestFieldError(std::string field, const std::string& message) : Error(message), field_(std::move(field)) {}

  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

template <typename... Args>
[[noreturn]] void fail_field(std::string field, fmt::format_string<Args...> format, Args&&... args) {
  throw RequestFieldError(std::move(field), fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tern
