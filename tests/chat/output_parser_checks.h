#pragma once
// Shared by the output-parser tests: every output is parsed whole, streamed one byte at a time and streamed in
// random chunks, and all three must give the expected message.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_output_parser.h"

namespace tern::chat::parser_checks {

// Parsers picked by name, with ids "call_t0", "call_t1"... so that messages compare exactly.
inline ChatOutputOptions parser_options(std::string tool_call_parser, std::string reasoning_parser = "",
                                        bool prompt_opens_think = false) {
  ChatOutputOptions options;
  options.tool_call_parser = std::move(tool_call_parser);
  options.reasoning_parser = std::move(reasoning_parser);
  options.prompt_opens_think = prompt_opens_think;
  options.tool_call_id_prefix = "t";
  return options;
}

inline ChatMessage parse_in_chunks(std::string_view text, const ChatOutputOptions& options, std::vector<size_t> cuts) {
  ChatOutputParser parser(options);
  ChatMessage message;
  size_t pos = 0;
  for (size_t cut : cuts) {
    message.append(parser.feed(text.substr(pos, cut - pos)));
    pos = cut;
  }
  message.append(parser.feed(text.substr(pos)));
  message.append(parser.flush());
  return message;
}

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

inline void expect_message(const ChatMessage& message, const Expected& expected, const std::string& how) {
  SCOPED_TRACE(how);
  EXPECT_EQ(message.reasoning_content, expected.reasoning);
  EXPECT_EQ(message.content, expected.content);
  ASSERT_EQ(message.tool_calls.size(), expected.calls.size());
  for (size_t i = 0; i < expected.calls.size(); ++i) {
    EXPECT_EQ(message.tool_calls[i].id, "call_t" + std::to_string(i));
    EXPECT_EQ(message.tool_calls[i].name, expected.calls[i].first);
    EXPECT_EQ(message.tool_calls[i].arguments, expected.calls[i].second);
  }
}

// Whole, byte by byte, and in random chunks: all must give `expected`.
inline void expect_parsed(std::string_view text, const ChatOutputOptions& options, const Expected& expected) {
  SCOPED_TRACE(std::string(text));
  expect_message(ChatOutputParser::parse(text, options), expected, "whole");
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
  expect_message(parse_in_chunks(text, options, every_byte), expected, "byte by byte");
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<size_t> cuts;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % 7;
      if (pos >= text.size()) break;
      cuts.push_back(pos);
    }
    expect_message(parse_in_chunks(text, options, cuts), expected, "random chunks, trial " + std::to_string(trial));
  }
}

// Every prefix of `text`, parsed as a whole output that stopped there: never a crash, and what is not a call is
// content or reasoning (nothing is lost: the message's text adds up to no more than the prefix).
inline void expect_prefixes_parse(std::string_view text, const ChatOutputOptions& options) {
  for (size_t len = 0; len <= text.size(); ++len) {
    std::string_view prefix = text.substr(0, len);
    ChatMessage message = ChatOutputParser::parse(prefix, options);
    EXPECT_LE(message.content.size() + message.reasoning_content.size(), prefix.size()) << prefix;
  }
}

}  // namespace tern::chat::parser_checks
