#pragma once
// Finds stop strings in a stream of text deltas, including ones that span several tokens, and keeps them out of
// the output: text that could still be the start of a stop string is held back until the next delta decides.
#include <string>
#include <string_view>
#include <vector>

namespace tern {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;      // text that is safe to emit now
    bool stopped = false;  // a stop string appeared; `text` ends just before it
  };
  Result push(std::string_view delta);
  // The held-back text, once the sequence ends for another reason.
  std::string flush();

 private:
  std::vector<std::string> stop_strings_;
  std::string pending_;  // held back: a suffix that is a proper prefix of some stop string
};

}  // namespace tern
