#pragma once
// The output parsers by name, as vLLM's --tool-call-parser and --reasoning-parser pick them. One table each in
// output_parser_registry.cpp, one line per parser.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"

namespace tern::chat {

// How a forced call writes its arguments.
enum class ForcedArguments {
  kJsonObject,      // one JSON object following the tool's parameter schema
  kDsmlParameters,  // DeepSeek's DSML: one <｜DSML｜parameter> per schema property, strings as raw text
  kTaggedParameters,  // one tagged parameter per schema property (TaggedParameterSyntax), strings as raw text
  kPythonKeywords,    // Python keyword arguments, values as Python literals (the pythonic format)
};

// Formats that write each argument as
//   key_prefix KEY key_suffix VALUE value_suffix
// (GLM-4.5's <arg_key>/<arg_value>, Qwen3-Coder's <parameter=KEY>). A value is raw text for a string property and
// JSON otherwise; raw text cannot hold `value_end_tag` or `block_end_tag`, where the parser ends the value.
struct TaggedParameterSyntax {
  std::string_view key_prefix;
  std::string_view key_suffix;
  std::string_view value_suffix;
  std::string_view value_end_tag;
  std::string_view block_end_tag;
};

// How forced tool choice (tool_choice "required" or a named function) writes calls in a format; the server builds
// the grammar from it. A call is
//   call_prefix NAME name_suffix ARGUMENTS call_suffix              when arguments_key is empty, or
//   call_prefix {"name": NAME, "<arguments_key>": ARGUMENTS} call_suffix
// and the calls are section_prefix CALL (separator CALL)* section_suffix, or exactly one CALL with single_call.
// ARGUMENTS are written as `arguments` says.
struct ForcedToolCallSyntax {
  std::string_view arguments_key;
  std::string_view call_prefix;
  std::string_view name_suffix;
  std::string_view call_suffix;
  std::string_view separator;
  std::string_view section_prefix;
  std::string_view section_suffix;
  ForcedArguments arguments = ForcedArguments::kJsonObject;
  // The format ends the assistant's turn after one call (harmony's <|call|>), so "required" is one call too.
  bool single_call = false;
  // How kTaggedParameters are written.
  const TaggedParameterSyntax* parameters = nullptr;
};

struct ToolCallParserEntry {
  std::string_view name;
  // `tools`: the request's tools, for formats whose values read by the schema (empty when not known).
  std::unique_ptr<ToolCallParser> (*make)(const ToolParameterSchemas& tools);
  // The format's markers are special tokens, which the detokenizer must then keep in the text it hands over.
  bool keeps_special_tokens;
  // nullptr: forced tool choice cannot write the format's calls.
  const ForcedToolCallSyntax* forced_syntax;
};

// Where a format's reasoning ends, as text, for structured outputs that start after it (vLLM's reasoning parsers'
// is_reasoning_end): `end`, then, when `end_suffix` is not empty, `end_suffix` at most `max_tokens_between` tokens
// after it (harmony's <|channel|>final ... <|message|>, with <|constrain|>json or the like between).
// `think_block`: the reasoning is a <think> block, which a prompt may have closed already (thinking switched off).
struct ReasoningEndSyntax {
  std::string_view end;
  std::string_view end_suffix;
  int32_t max_tokens_between = 0;
  bool think_block = false;
};

struct ReasoningParserEntry {
  std::string_view name;
  // `prompt_opens_think`: the rendered prompt ends inside an open <think> block (ThinkTagReasoningParser::
  // prompt_opens_reasoning); formats that always start in reasoning, or do not use <think>, ignore it.
  std::unique_ptr<ReasoningParser> (*make)(bool prompt_opens_think);
  bool keeps_special_tokens;
  ReasoningEndSyntax reasoning_end;
};

std::span<const ToolCallParserEntry> tool_call_parsers();
std::span<const ReasoningParserEntry> reasoning_parsers();

// nullptr for a name that is not in the table.
const ToolCallParserEntry* find_tool_call_parser(std::string_view name);
const ReasoningParserEntry* find_reasoning_parser(std::string_view name);

// The names, comma-separated, for errors and --help.
std::string tool_call_parser_names();
std::string reasoning_parser_names();

}  // namespace tern::chat
