#pragma once
// Reads OpenAI's harmony format (gpt-oss) as it streams: a sequence of messages
//   [<|start|>ROLE]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>FORMAT]<|message|>BODY<|end|>
// where a tool call ends with <|call|> instead, and the final answer with <|return|>. The chat template ends the
// prompt with "<|start|>assistant", so the output begins at <|channel|>. The recipient may also stand before the
// channel ("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>").
// Markers are harmony's special tokens: the text must be detokenized with them kept.
#include <string>
#include <string_view>
#include <vector>

namespace tern::chat {

struct HarmonyEvent {
  enum class Kind {
    kText,    // text outside any message (or a header the output ended in), as written
    kHeader,  // a message begins: `text` is its header as written, markers included
    kBody,    // a piece of the message body
    kEnd,     // the message ends: `text` is its end marker, empty when the output ended inside the body
  };
  Kind kind;
  std::string text;
  std::string channel;    // kHeader: "analysis", "commentary", "final"
  std::string recipient;  // kHeader: "functions.NAME" for a tool call, else empty
};

class HarmonyReader {
 public:
  std::vector<HarmonyEvent> feed(std::string_view text);
  std::vector<HarmonyEvent> flush();

 private:
  enum class State { kOutside, kHeader, kBody };
  void process(std::vector<HarmonyEvent>& events, bool final);

  State state_ = State::kOutside;
  std::string buffer_;
};

}  // namespace tern::chat
