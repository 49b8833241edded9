#pragma once
// DeepSeek-V3.2 and V4 tool calls in DSML (DeepSeek's markup), as their encoders write them (deepseek_encoder.h):
//   \n\n<｜DSML｜BLOCK>
//   <｜DSML｜invoke name="NAME">
//   <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>
//   ...
//   </｜DSML｜invoke>
//   ...
//   </｜DSML｜BLOCK>
// BLOCK is function_calls (V3.2) or tool_calls (V4). A string="true" value is the text itself; a string="false"
// value is JSON (text that is not JSON stays a string rather than losing the call). Each call is reported as its
// </｜DSML｜invoke> arrives; the blank line before the block is formatting. A block or call that does not parse,
// or that the output ends inside, stays content from where it went wrong, markers included.
#include <memory>

#include "chat/tool_call_parser.h"

namespace tern::chat {

std::unique_ptr<ToolCallParser> make_deepseek_v32_tool_call_parser();
std::unique_ptr<ToolCallParser> make_deepseek_v4_tool_call_parser();

}  // namespace tern::chat
