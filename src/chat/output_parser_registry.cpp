#include "chat/output_parser_registry.h"

#include "chat/dsml_tool_call_parser.h"
#include "chat/reasoning_parsers.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

constexpr ForcedToolCallSyntax kHermesSyntax{"arguments", "<tool_call>\n", "", "\n</tool_call>", "\n", "", ""};
constexpr ForcedToolCallSyntax kLlama3JsonSyntax{"parameters", "", "", "", "; ", "", ""};
constexpr ForcedToolCallSyntax kDeepSeekV3Syntax{
    "", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n", "\n```<｜tool▁call▁end｜>", "\n",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"};
constexpr ForcedToolCallSyntax kDeepSeekV31Syntax{
    "", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"};
constexpr ForcedToolCallSyntax kMistralSyntax{"arguments", "", "", "", ", ", "[TOOL_CALLS][", "]"};
constexpr ForcedToolCallSyntax kKimiK2Syntax{
    "", "<|tool_call_begin|>functions.", ":0<|tool_call_argument_begin|>", "<|tool_call_end|>", "",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"};
// The call ends at the <|call|> token, which is an EOS of gpt-oss: the grammar ends after the arguments, where only
// EOS tokens are allowed, and the parser ends a call at the end of the output (the engine leaves EOS text out).
constexpr ForcedToolCallSyntax kOpenAiSyntax{
    "", "<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "", "", "", "",
    ForcedArguments::kJsonObject, /*single_call=*/true};
// As DeepSeek's encoders write calls (deepseek_encoder.cpp: render_tool_calls); each parameter ends with "\n".
constexpr ForcedToolCallSyntax kDeepSeekV32Syntax{
    "", "<｜DSML｜invoke name=\"", "\">\n", "</｜DSML｜invoke>", "\n", "\n\n<｜DSML｜function_calls>\n",
    "\n</｜DSML｜function_calls>", ForcedArguments::kDsmlParameters};
constexpr ForcedToolCallSyntax kDeepSeekV4Syntax{
    "", "<｜DSML｜invoke name=\"", "\">\n", "</｜DSML｜invoke>", "\n", "\n\n<｜DSML｜tool_calls>\n",
    "\n</｜DSML｜tool_calls>", ForcedArguments::kDsmlParameters};
// As GLM-4.5's chat template writes calls: each argument ends with "\n", and calls follow each other on new lines.
constexpr TaggedParameterSyntax kGlm45Parameters{"<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n",
                                                 "</arg_value>", "</tool_call>"};
constexpr ForcedToolCallSyntax kGlm45Syntax{
    "", "<tool_call>", "\n", "</tool_call>", "\n", "", "", ForcedArguments::kTaggedParameters,
    /*single_call=*/false, &kGlm45Parameters};
// As Qwen3-Coder's chat template writes calls: the template puts one newline on each side of a value, which the
// parser drops.
constexpr TaggedParameterSyntax kQwen3CoderParameters{"<parameter=", ">\n", "\n</parameter>\n", "</parameter>",
                                                      "</tool_call>"};
constexpr ForcedToolCallSyntax kQwen3CoderSyntax{
    "", "<tool_call>\n<function=", ">\n", "</function>\n</tool_call>", "\n", "", "",
    ForcedArguments::kTaggedParameters, /*single_call=*/false, &kQwen3CoderParameters};
constexpr ForcedToolCallSyntax kPythonicSyntax{"", "", "(", ")", ", ", "[", "]", ForcedArguments::kPythonKeywords};

// The formats whose parsers read every value without the request's schemas.
template <std::unique_ptr<ToolCallParser> (*make)()>
std::unique_ptr<ToolCallParser> schema_free(const ToolParameterSchemas&) {
  return make();
}

constexpr ToolCallParserEntry kToolCallParsers[] = {
    {"deepseek_v3", schema_free<make_deepseek_v3_tool_call_parser>, false, &kDeepSeekV3Syntax},
    {"deepseek_v31", schema_free<make_deepseek_v31_tool_call_parser>, false, &kDeepSeekV31Syntax},
    {"deepseek_v32", schema_free<make_deepseek_v32_tool_call_parser>, false, &kDeepSeekV32Syntax},
    {"deepseek_v4", schema_free<make_deepseek_v4_tool_call_parser>, false, &kDeepSeekV4Syntax},
    {"glm45", make_glm45_tool_call_parser, false, &kGlm45Syntax},
    {"hermes", schema_free<make_hermes_tool_call_parser>, false, &kHermesSyntax},
    {"kimi_k2", schema_free<make_kimi_k2_tool_call_parser>, true, &kKimiK2Syntax},
    {"llama3_json", schema_free<make_llama3_json_tool_call_parser>, false, &kLlama3JsonSyntax},
    {"mistral", schema_free<make_mistral_tool_call_parser>, true, &kMistralSyntax},
    {"openai", schema_free<make_openai_tool_call_parser>, true, &kOpenAiSyntax},
    {"pythonic", schema_free<make_pythonic_tool_call_parser>, false, &kPythonicSyntax},
    {"qwen3_coder", make_qwen3_coder_tool_call_parser, false, &kQwen3CoderSyntax},
};

constexpr ReasoningEndSyntax kThinkBlockEnd{"</think>", "", 0, true};
// vLLM's gpt_oss parser allows up to 20 tokens between the two parts.
constexpr ReasoningEndSyntax kHarmonyFinalMessage{"<|channel|>final", "<|message|>", 20, false};

constexpr ReasoningParserEntry kReasoningParsers[] = {
    {"deepseek_r1", make_deepseek_r1_reasoning_parser, false, kThinkBlockEnd},
    {"deepseek_v3", make_deepseek_v3_reasoning_parser, false, kThinkBlockEnd},
    {"gpt_oss", make_gpt_oss_reasoning_parser, true, kHarmonyFinalMessage},
    {"kimi_k2", make_kimi_k2_reasoning_parser, true, kThinkBlockEnd},
    {"qwen3", make_qwen3_reasoning_parser, false, kThinkBlockEnd},
};

template <typename Entry>
const Entry* find_entry(std::span<const Entry> entries, std::string_view name) {
  for (const Entry& entry : entries) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

template <typename Entry>
std::string entry_names(std::span<const Entry> entries) {
  std::string names;
  for (const Entry& entry : entries) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  return names;
}

}  // namespace

std::span<const ToolCallParserEntry> tool_call_parsers() { return kToolCallParsers; }
std::span<const ReasoningParserEntry> reasoning_parsers() { return kReasoningParsers; }

const ToolCallParserEntry* find_tool_call_parser(std::string_view name) {
  return find_entry(tool_call_parsers(), name);
}
const ReasoningParserEntry* find_reasoning_parser(std::string_view name) {
  return find_entry(reasoning_parsers(), name);
}

std::string tool_call_parser_names() { return entry_names(tool_call_parsers()); }
std::string reasoning_parser_names() { return entry_names(reasoning_parsers()); }

}  // namespace tern::chat
