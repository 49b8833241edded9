#include "grammar/region_walk_cache.h"

namespace tern::grammar {

size_t ShapeHash::operator()(const std::vector<uint32_t>& shape) const {
  // Multiply-xorshift over the words: shapes run to thousands of words and every scannable node hashes one.
  uint64_t h = shape.size();
  for (uint32_t word : shape) {
    h = (h ^ word) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}

RegionWalkCache::RegionWalkCache(uint64_t vocabulary_fingerprint, size_t max_shapes)
    : fingerprint_(vocabulary_fingerprint), max_shapes_(max_shapes) {}

std::shared_ptr<const RegionTokenWalk> RegionWalkCache::get(const std::vector<uint32_t>& shape,
                                                            const TokenVocabulary& vocabulary) {
  const bool own_vocabulary = vocabulary.fingerprint() == fingerprint_;
  if (own_vocabulary) {
    std::lock_guard lock(mutex_);
    if (auto it = walks_.find(shape); it != walks_.end()) return it->second;
  }
  auto walk = std::make_shared<const RegionTokenWalk>(walk_wide_region(shape, vocabulary));
  if (!own_vocabulary) return walk;
  std::lock_guard lock(mutex_);
  if (walks_.size() >= max_shapes_) walks_.clear();
  return walks_.emplace(shape, std::move(walk)).first->second;
}

size_t RegionWalkCache::size() const {
  std::lock_guard lock(mutex_);
  return walks_.size();
}

}  // namespace tern::grammar
