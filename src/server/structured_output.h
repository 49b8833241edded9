#pragma once
// Structured outputs in a request: OpenAI's response_format, vLLM's guided_json / guided_regex / guided_grammar /
// guided_choice and structured_outputs, and tool calls forced by tool_choice, read into one grammar source and
// compiled (through the model's GrammarCache) into the engine's SamplingParams::constraint.
#include <memory>
#include <optional>
#include <string>

#include "grammar/grammar_cache.h"
#include "server/request_fields.h"

namespace tern::server {

struct OutputConstraint {
  grammar::GrammarKind kind = grammar::GrammarKind::kEbnf;
  std::string source;
  std::string param;  // the request field it came from, named in errors
};

// The constraint of a request, if it asks for one. More than one (response_format together with a guided_* field,
// say) is a 400 ApiError, as is a malformed field.
std::optional<OutputConstraint> parse_output_constraint(const RequestFields& fields);

// Output that is one call (`function_name` set) or one or more calls (nullopt) to the `tools` (OpenAI's list, each
// {"type": "function", "function": {"name", "parameters"}}), with arguments following each tool's parameter schema,
// in the syntax of the named tool-call parser (its ForcedToolCallSyntax). A parser without one, or none, is a 400
// naming tool_choice: the output would be in a syntax the parser cannot read back.
OutputConstraint tool_call_constraint(const Json& tools, const std::optional<std::string>& function_name,
                                      std::string_view tool_call_parser);

// Compiles the constraint (or finds it compiled); a source that does not parse is a 400 ApiError naming the field
// and the position of the error.
std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(grammar::GrammarCache& cache,
                                                                   const OutputConstraint& constraint);

}  // namespace tern::server
