#pragma once
// Splits a Jinja template into text and tag tokens, applying whitespace control the way Jinja's lexer does:
// `{%-`/`-%}` strip all whitespace on that side, trim_blocks drops the newline after a block tag, lstrip_blocks
// drops the indentation before a block tag, and one trailing newline of the template is dropped.
#include <string>
#include <string_view>
#include <vector>

namespace tern::chat {

struct SourcePos {
  int line = 1;
  int column = 1;
};

struct TemplateOptions {
  // Hugging Face renders chat templates with trim_blocks=True and lstrip_blocks=True.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

enum class TokenKind {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text holds the decoded value
  kInteger,  // text holds the digits
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  SourcePos pos;
};

// Throws tern::Error naming the line and column of a lexical error (unclosed tag, bad string literal...).
std::vector<Token> tokenize_template(std::string_view source, const TemplateOptions& options);

std::string describe_token(const Token& token);

}  // namespace tern::chat
