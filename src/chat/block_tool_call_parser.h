#pragma once
// The shape most tool-call formats share: calls sit in a block between a start and an end marker (Hermes'
// <tool_call>…</tool_call>, DeepSeek's <｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>); text outside blocks is content.
// A block is parsed once its end marker arrives, or when the output ends inside it (a model may stop at EOS before
// writing the end marker). A block that does not parse stays content, markers included: nothing the model wrote is
// lost. The whitespace after a parsed block is formatting between calls, not content.
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_parser.h"

namespace tern::chat {

class BlockToolCallParser : public BufferedToolCallParser {
 protected:
  // An empty `end_marker`: the block runs to the end of the output (Mistral's [TOOL_CALLS]).
  BlockToolCallParser(std::string_view start_marker, std::string_view end_marker);

  // Reads the text between the markers into `calls`; false if it is not a well-formed block.
  virtual bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const = 0;

  // The block shape of DeepSeek's and Kimi K2's formats: calls each between `call_begin` and `call_end`, only
  // whitespace between them, read by `read_call`; the last call's end marker may be missing when the output
  // stopped there. False unless every call reads and there is at least one.
  static bool parse_delimited_calls(std::string_view inner, std::string_view call_begin, std::string_view call_end,
                                    bool (*read_call)(std::string_view, ParsedToolCall&),
                                    std::vector<ParsedToolCall>& calls);

 private:
  void process(ToolCallParseDelta& delta, bool final) override;
  void close_block(ToolCallParseDelta& delta, size_t inner_len, size_t consumed_len);

  std::string_view start_marker_;
  std::string_view end_marker_;
  bool in_block_ = false;
  bool after_block_ = false;
};

}  // namespace tern::chat
