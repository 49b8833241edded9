#include "grammar/grammar_cache.h"

namespace tern::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t max_entries, CompileOptions options,
                           size_t max_bytes)
    : vocabulary_(std::move(vocabulary)),
      max_entries_(std::max<size_t>(max_entries, 1)),
      options_(std::move(options)),
      max_bytes_(max_bytes) {
  // Every grammar compiled here shares the region walks of this vocabulary.
  if (!options_.region_walks) options_.region_walks = std::make_shared<RegionWalkCache>(vocabulary_->fingerprint());
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(GrammarKind kind, std::string_view source) {
  // The full source is the key (not only its hash), so two sources can never share an entry.
  std::string key = std::string(grammar_kind_name(kind)) + '\0' + std::string(source);
  std::promise<std::shared_ptr<const CompiledGrammar>> promise;
  Future future;
  bool compile_here = false;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++hits_;
      it->second.last_use = ++clock_;
      future = it->second.compiled;
      // The grammars grow as requests use them: measure again on every use.
      evict_over_budget();
    } else {
      ++misses_;
      future = promise.get_future().share();
      entries_.emplace(key, Entry{future, nullptr, ++clock_});
      compile_here = true;
    }
  }
  if (compile_here) {
    // Compile outside the lock: other keys stay available, waiters for this key block on the future.
    try {
      std::shared_ptr<const CompiledGrammar> grammar = CompiledGrammar::compile(kind, source, vocabulary_, options_);
      promise.set_value(grammar);
      std::lock_guard lock(mutex_);
      if (auto it = entries_.find(key); it != entries_.end()) it->second.grammar = std::move(grammar);
      evict_over_budget();
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard lock(mutex_);
      entries_.erase(key);
    }
  }
  return future.get();
}

void GrammarCache::evict_over_budget() {
  size_t bytes = 0;
  for (auto& [key, entry] : entries_) {
    entry.measured_bytes = entry.grammar ? entry.grammar->memory_bytes() : 0;
    bytes += entry.measured_bytes;
  }
  // Grammars still compiling are not measured yet and are not evicted (their waiters hold the key).
  while (bytes > max_bytes_ || entries_.size() > max_entries_) {
    auto oldest = entries_.end();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->second.grammar && (oldest == entries_.end() || e->second.last_use < oldest->second.last_use)) oldest = e;
    }
    if (oldest == entries_.end()) break;
    bytes -= oldest->second.measured_bytes;
    entries_.erase(oldest);
    ++evictions_;
  }
}

void GrammarCache::warm_up() {
  // Compiled and dropped: only the region walks they leave in options_.region_walks are wanted. A bounded string's
  // last 16 positions have the same shapes whatever its maxLength, so one bound longer than that covers them.
  CompiledGrammar::compile(GrammarKind::kJsonObject, "", vocabulary_, options_);
  CompiledGrammar::compile(GrammarKind::kJsonSchema, R"({"type": "string", "maxLength": 32})", vocabulary_, options_);
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

size_t GrammarCache::num_hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

size_t GrammarCache::num_misses() const {
  std::lock_guard lock(mutex_);
  return misses_;
}

size_t GrammarCache::memory_bytes() const {
  std::lock_guard lock(mutex_);
  size_t bytes = 0;
  for (const auto& [key, entry] : entries_) {
    if (entry.grammar) bytes += entry.grammar->memory_bytes();
  }
  return bytes;
}

size_t GrammarCache::num_evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

}  // namespace tern::grammar
