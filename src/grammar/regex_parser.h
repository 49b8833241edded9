#pragma once
// Regular expressions (a practical subset of ECMAScript/PCRE syntax) to a grammar expression.
// Supported: literals, escapes (\d \w \s and negations, \n \t \xHH \uHHHH \u{...}), classes with ranges and negation,
// '.', alternation, groups ((?:...), named), quantifiers * + ? {m} {m,} {m,n} (lazy/possessive suffixes ignored).
// The whole pattern must match; ^ and $ are accepted and ignored. Backreferences, lookaround and \b are errors.
#include <string_view>

#include "grammar/grammar_expr.h"

namespace tern::grammar {

struct RegexOptions {
  // Produce the JSON-encoded form of each matching string (the text between the quotes of a JSON string):
  // '"', '\' and control characters become escape sequences. Used for JSON Schema "pattern".
  bool json_string_escaping = false;
};

Expr parse_regex(std::string_view pattern, const RegexOptions& options = {});

// The set of code points matched by a JSON Schema/JavaScript \s.
std::vector<CodepointRange> regex_whitespace_ranges();

// A code point set as the expression matching its JSON-escaped encoding (see RegexOptions::json_string_escaping).
Expr json_escaped_char_set(const std::vector<CodepointRange>& ranges);

}  // namespace tern::grammar
