#pragma once
// The tool-call formats, one file each (src/chat/<name>_tool_call_parser.cpp); output_parser_registry.cpp names them.
#include <memory>

#include "chat/tool_call_parser.h"

namespace tern::chat {

std::unique_ptr<ToolCallParser> make_hermes_tool_call_parser();
std::unique_ptr<ToolCallParser> make_llama3_json_tool_call_parser();
std::unique_ptr<ToolCallParser> make_deepseek_v3_tool_call_parser();
std::unique_ptr<ToolCallParser> make_deepseek_v31_tool_call_parser();
std::unique_ptr<ToolCallParser> make_openai_tool_call_parser();
std::unique_ptr<ToolCallParser> make_mistral_tool_call_parser();
std::unique_ptr<ToolCallParser> make_kimi_k2_tool_call_parser();
// GLM-4.5's and Qwen3-Coder's values are bare text, read by the request's tool schemas (parameter_value).
std::unique_ptr<ToolCallParser> make_glm45_tool_call_parser(const ToolParameterSchemas& tools);
std::unique_ptr<ToolCallParser> make_qwen3_coder_tool_call_parser(const ToolParameterSchemas& tools);
std::unique_ptr<ToolCallParser> make_pythonic_tool_call_parser();

}  // namespace tern::chat
