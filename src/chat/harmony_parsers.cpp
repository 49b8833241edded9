// gpt-oss's harmony output, read by two parsers as vLLM splits it: the gpt_oss reasoning parser takes the analysis
// channel as reasoning, and the openai tool-call parser takes messages addressed to=functions.NAME as calls.
//  - gpt_oss reasoning: analysis bodies -> reasoning; final and commentary bodies -> content; a message addressed
//    to a recipient is handed on as written (header, body, end marker) for the tool-call parser.
//  - openai tool calls: a message to=functions.NAME -> a call once it ends (<|call|>, or the end of the output
//    when <|call|> is the EOS that stopped it) with a JSON object body, else it stays content as written;
//    final and commentary bodies -> content; analysis and built-in tools (browser, python) are dropped, as vLLM
//    drops them.
// With both, the reasoning parser runs first and the tool-call parser reads what it hands on.
#include "chat/harmony_reader.h"
#include "chat/reasoning_parsers.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

constexpr std::string_view kFunctionsPrefix = "functions.";

class GptOssReasoningParser : public ReasoningParser {
 public:
  ReasoningDelta feed(std::string_view text) override { return apply(reader_.feed(text)); }
  ReasoningDelta flush() override { return apply(reader_.flush()); }

 private:
  enum class Target { kContent, kReasoning, kHandOn };

  ReasoningDelta apply(const std::vector<HarmonyEvent>& events) {
    ReasoningDelta delta;
    for (const HarmonyEvent& event : events) {
      switch (event.kind) {
        case HarmonyEvent::Kind::kText: delta.content += event.text; break;
        case HarmonyEvent::Kind::kHeader:
          if (!event.recipient.empty()) {
            target_ = Target::kHandOn;
            delta.content += event.text;
          } else {
            target_ = event.channel == "analysis" ? Target::kReasoning : Target::kContent;
          }
          break;
        case HarmonyEvent::Kind::kBody:
          (target_ == Target::kReasoning ? delta.reasoning : delta.content) += event.text;
          break;
        case HarmonyEvent::Kind::kEnd:
          if (target_ == Target::kHandOn) delta.content += event.text;
          target_ = Target::kContent;
          break;
      }
    }
    return delta;
  }

  HarmonyReader reader_;
  Target target_ = Target::kContent;
};

class OpenAiToolCallParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) override { return apply(reader_.feed(text)); }
  ToolCallParseDelta flush() override { return apply(reader_.flush()); }

 private:
  enum class Target { kContent, kCall, kDropped };

  ToolCallParseDelta apply(const std::vector<HarmonyEvent>& events) {
    ToolCallParseDelta delta;
    for (const HarmonyEvent& event : events) {
      switch (event.kind) {
        case HarmonyEvent::Kind::kText: delta.content += event.text; break;
        case HarmonyEvent::Kind::kHeader:
          if (event.recipient.rfind(kFunctionsPrefix, 0) == 0) {
            target_ = Target::kCall;
            call_header_ = event.text;
            call_name_ = event.recipient.substr(kFunctionsPrefix.size());
            call_body_.clear();
          } else if (event.channel == "analysis" || !event.recipient.empty()) {
            target_ = Target::kDropped;
          } else {
            target_ = Target::kContent;
          }
          break;
        case HarmonyEvent::Kind::kBody:
          if (target_ == Target::kContent) delta.content += event.text;
          if (target_ == Target::kCall) call_body_ += event.text;
          break;
        case HarmonyEvent::Kind::kEnd:
          if (target_ == Target::kCall) end_call(event.text, delta);
          target_ = Target::kContent;
          break;
      }
    }
    return delta;
  }

  void end_call(const std::string& end_marker, ToolCallParseDelta& delta) {
    ParsedToolCall call;
    call.name = call_name_;
    if (!call.name.empty() && arguments_from_json_text(call_body_, call.arguments)) {
      delta.calls.push_back(std::move(call));
    } else {
      delta.content += call_header_ + call_body_ + end_marker;
    }
  }

  HarmonyReader reader_;
  Target target_ = Target::kContent;
  std::string call_header_;
  std::string call_name_;
  std::string call_body_;
};

}  // namespace

std::unique_ptr<ReasoningParser> make_gpt_oss_reasoning_parser(bool) {
  return std::make_unique<GptOssReasoningParser>();
}

std::unique_ptr<ToolCallParser> make_openai_tool_call_parser() { return std::make_unique<OpenAiToolCallParser>(); }

}  // namespace tern::chat
