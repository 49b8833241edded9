#include "server/reasoning_constraint.h"

#include "chat/output_parser_registry.h"
#include "chat/reasoning_parser.h"

namespace tern::server {

std::optional<ReasoningEndMarker> constraint_start_after_reasoning(const chat::ChatOutputOptions& options,
                                                                   std::string_view prompt,
                                                                   const Tokenizer& tokenizer) {
  const chat::ReasoningParserEntry* parser = chat::find_reasoning_parser(options.reasoning_parser);
  if (!parser) return std::nullopt;
  const chat::ReasoningEndSyntax& syntax = parser->reasoning_end;
  if (syntax.think_block && chat::ThinkTagReasoningParser::prompt_closes_reasoning(prompt)) return std::nullopt;
  ReasoningEndMarker marker;
  marker.prefix = tokenizer.encode(syntax.end, /*add_special_tokens=*/false);
  if (!syntax.end_suffix.empty()) {
    marker.suffix = tokenizer.encode(syntax.end_suffix, /*add_special_tokens=*/false);
    marker.max_tokens_between = syntax.max_tokens_between;
  }
  return marker;
}

}  // namespace tern::server
