#pragma once
// A Jinja2 template interpreter for the subset Hugging Face chat templates use. No Debian package provides a C++
// Jinja implementation, so this one is written from the Jinja documentation and checked against renders made by
// transformers (tests/chat). See template_lexer.h, template_parser.h and template_builtins.h for the parts.
#include <memory>
#include <string>
#include <string_view>

#include "chat/template_ast.h"
#include "chat/template_lexer.h"
#include "chat/value.h"

namespace tern::chat {

// Bounds on one render, so a malformed or hostile template fails with an error instead of exhausting the machine.
struct RenderLimits {
  int max_call_depth = 100;                  // nested macro calls
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_loop_iterations = 1'000'000;  // across all loops of the render
};

class Template {
 public:
  // Parses `source`; throws tern::Error with the line and column of a syntax error.
  explicit Template(std::string_view source, TemplateOptions options = {});

  // Renders with `variables` as the global context (beside range, namespace, raise_exception...).
  // Throws tern::Error with the line and column of the failing expression or statement.
  std::string render(const ValueMap& variables, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const StmtList> body_;
};

}  // namespace tern::chat
