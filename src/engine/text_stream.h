#pragma once
// Turns a sequence's tokens into text as they arrive. The engine works without one (token ids only); stop
// strings need one. Injected as a factory so the engine does not depend on a tokenizer.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tern {

class Tokenizer;

class TextStream {
 public:
  virtual ~TextStream() = default;
  // The text the token completes (possibly empty while a character is incomplete).
  virtual std::string push(int32_t token_id) = 0;
  // Whatever is still held back, at the end of the sequence.
  virtual std::string flush() = 0;
};

using TextStreamFactory = std::function<std::unique_ptr<TextStream>()>;

// Incremental detokenization with `tokenizer` (copied; copies share the model), skipping special tokens.
TextStreamFactory tokenizer_text_streams(const Tokenizer& tokenizer);

}  // namespace tern
