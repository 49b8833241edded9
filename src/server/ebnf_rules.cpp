#include "server/ebnf_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "grammar/json_schema_converter.h"
#include "server/api_error.h"

namespace tern::server {

namespace {

bool is_rule_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

// Where the quoted literal or character class that starts at `pos` ends (one past its closing character).
size_t skip_ebnf_quoted(std::string_view ebnf, size_t pos, char close) {
  for (++pos; pos < ebnf.size() && ebnf[pos] != close; ++pos) {
    if (ebnf[pos] == '\\') ++pos;
  }
  return pos + 1;
}

}  // namespace

std::string ebnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string literal_item(std::string_view text) { return text.empty() ? "" : ebnf_literal(text) + " "; }

std::string schema_rules(const Json& schema, const std::string& rule_prefix) {
  std::string ebnf;
  try {
    ebnf = grammar::json_schema_to_ebnf(std::string_view(schema.dump()));
  } catch (const Error& e) {
    fail_param("tools", "a tool's 'parameters' schema cannot be enforced: {}", e.what());
  }
  std::string out;
  for (size_t pos = 0; pos < ebnf.size();) {
    const char c = ebnf[pos];
    if (c == '"' || c == '\'' || c == '[') {
      size_t end = std::min(skip_ebnf_quoted(ebnf, pos, c == '[' ? ']' : c), ebnf.size());
      out.append(ebnf, pos, end - pos);
      pos = end;
    } else if (is_rule_name_char(c)) {
      size_t end = pos;
      while (end < ebnf.size() && is_rule_name_char(ebnf[end])) ++end;
      const bool is_name = !std::isdigit(static_cast<unsigned char>(c));
      out += (is_name ? rule_prefix : std::string()) + ebnf.substr(pos, end - pos);
      pos = end;
    } else {
      out += c;
      ++pos;
    }
  }
  return out;
}

}  // namespace tern::server
