#pragma once
// EBNF grammars in GBNF/Lark-like syntax:
//   root ::= "{" ws pair ("," ws pair)* "}"      (or  name: ...  as in Lark; an optional ';' ends a rule)
//   pair ::= [a-z]+ ":" [0-9]{1,3}
// Items: "strings" and 'strings' with escapes (\n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH), character classes [a-z]
// with ranges and negation [^...], '.' (any code point), groups ( ... ), rule names, /regex/ literals
// (see regex_parser.h), and the quantifiers ? * + {m} {m,} {m,n}. Comments: '#' or '//' to the end of the line.
#include <string_view>

#include "grammar/grammar_expr.h"

namespace tern::grammar {

Grammar parse_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace tern::grammar
