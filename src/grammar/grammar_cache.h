#pragma once
// Compiled grammars keyed by (kind, source, vocabulary): requests with the same response format share one compile,
// and all compiles share one RegionWalkCache (unless the options bring their own), so a new schema walks only the
// region shapes no earlier schema had. Thread-safe; concurrent requests for the same key wait for a single
// compilation.
//
// Bounded in entries and in bytes: a server that sees many distinct schemas over days keeps the most recently used
// grammars whose memory (automaton plus the token masks they grew in use, CompiledGrammar::memory_bytes) fits the
// budget, and evicts the least recently used past it. A grammar in use by a request lives on until the request ends.
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/compiled_grammar.h"

namespace tern::grammar {

inline constexpr size_t kDefaultGrammarCacheBytes = size_t{1} << 30;

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t max_entries = 256,
                        CompileOptions options = {}, size_t max_bytes = kDefaultGrammarCacheBytes);

  // The compiled grammar for the source; compiles on a miss. Compile errors are rethrown to every waiter and are
  // not cached.
  std::shared_ptr<const CompiledGrammar> get(GrammarKind kind, std::string_view source);
  // Walks the region shapes most schemas share (a JSON string's contents, the last positions of a bounded string)
  // so that the first request with a schema does not pay for them; a server calls it once at start.
  void warm_up();

  size_t size() const;
  size_t num_hits() const;
  size_t num_misses() const;
  // Bytes the cached grammars hold now (they grow in use between two gets, which evict down to max_bytes), and
  // grammars evicted so far (by the entry bound or the byte budget).
  size_t memory_bytes() const;
  size_t max_bytes() const { return max_bytes_; }
  size_t num_evictions() const;

 private:
  using Future = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Future compiled;
    std::shared_ptr<const CompiledGrammar> grammar;  // set once compiled; measured while cached
    uint64_t last_use = 0;
    size_t measured_bytes = 0;  // at the latest evict_over_budget
  };

  // Measures the compiled entries and evicts least recently used ones while over a bound. Holds mutex_.
  void evict_over_budget();

  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t max_entries_;
  CompileOptions options_;
  size_t max_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;  // key: kind + '\0' + source
  uint64_t clock_ = 0;
  size_t hits_ = 0;
  size_t misses_ = 0;
  size_t evictions_ = 0;
};

}  // namespace tern::grammar
