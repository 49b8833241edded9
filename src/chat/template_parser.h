#pragma once
// Parses the tokens of a Jinja template into statements, following Jinja's grammar and operator precedence.
#include <vector>

#include "chat/template_ast.h"
#include "chat/template_lexer.h"

namespace tern::chat {

// Throws tern::Error naming the line and column of a syntax error.
StmtList parse_template(const std::vector<Token>& tokens);

}  // namespace tern::chat
