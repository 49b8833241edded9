#pragma once
// Region walks (wide_region.h) shared by every grammar compiled for one vocabulary. Region shapes recur across
// schemas (an unbounded string's contents, the positions of a bounded string, common formats), so a server that
// keeps one of these next to its GrammarCache walks each shape once per process instead of once per schema.
// Thread-safe; bounded by a number of shapes, past which it starts over.
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/token_vocabulary.h"
#include "grammar/wide_region.h"

namespace tern::grammar {

struct ShapeHash {
  size_t operator()(const std::vector<uint32_t>& shape) const;
};

class RegionWalkCache {
 public:
  // A walk holds up to a bitmask over the vocabulary plus its exits (tens of KB for a 150K vocabulary), so the
  // default bound keeps the cache within tens of MB; one typical schema has a few hundred shapes.
  explicit RegionWalkCache(uint64_t vocabulary_fingerprint, size_t max_shapes = 1024);

  // The walk of the shape over the vocabulary, computed on a miss (outside the lock: concurrent misses on one shape
  // may both walk it). A vocabulary other than the cache's is walked and not kept.
  std::shared_ptr<const RegionTokenWalk> get(const std::vector<uint32_t>& shape, const TokenVocabulary& vocabulary);
  size_t size() const;

 private:
  uint64_t fingerprint_;
  size_t max_shapes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const RegionTokenWalk>, ShapeHash> walks_;
};

}  // namespace tern::grammar
