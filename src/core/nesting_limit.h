#pragma once
// The one bound on how deep request data may nest once it is inside a request: regular expressions, EBNF grammars,
// JSON schemas, JSON text carried in strings (a schema, tool-call arguments) and the values a chat template renders.
// Their parsers and walkers recurse once per level, and a thread has an 8 MiB stack: the hungriest of them (a regex
// group) takes under 1 KiB a level, so kMaxNestingDepth levels stay under half a MiB where ~11,000 overflowed it.
// (The request body itself is held to the stricter kMaxJsonNesting of server/request_body.h before it is parsed.)
#include <string>
#include <string_view>

namespace tern {

inline constexpr int kMaxNestingDepth = 512;

// "nesting deeper than 512 levels": every refusal says it in these words, after naming what nested too deep.
std::string nesting_limit_message();

// One level of a recursive parser or walker, counted in `depth` while it lives. Entering a level past
// kMaxNestingDepth throws tern::Error "<what>: nesting deeper than 512 levels" and leaves `depth` as it was.
class NestingLevel {
 public:
  NestingLevel(int& depth, std::string_view what);
  ~NestingLevel() { --depth_; }
  NestingLevel(const NestingLevel&) = delete;
  NestingLevel& operator=(const NestingLevel&) = delete;

 private:
  int& depth_;
};

// The deepest nesting of arrays and objects in JSON text, ignoring brackets inside strings. Stops counting (and
// returns) once it passes `limit`, so a hostile text costs no more than reading it once.
int json_nesting_depth(std::string_view text, int limit);

// Whether JSON text nests no deeper than kMaxNestingDepth: check it before parsing JSON text found inside a request,
// since what reads the parsed value (dump, copies, comparisons, conversions) recurses once per level.
bool json_nesting_within_limit(std::string_view text);

}  // namespace tern
