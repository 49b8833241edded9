#include "grammar/token_mask_cache.h"

#include <atomic>
#include <thread>

#include "grammar/token_prefix_walker.h"

namespace tern::grammar {
namespace {

NodeTokenMask classify_node(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, uint32_t node,
                            TokenPrefixWalker& walker) {
  FramePool pool;
  walker.reset({{node, kOpenFrame}});
  std::vector<int32_t> accepted;
  NodeTokenMask mask;
  const PdaNode& n = pda.nodes[node];
  for (uint32_t e = 0; e < n.num_byte_edges; ++e) {
    const ByteEdge& edge = pda.byte_edges[n.first_byte_edge + e];
    size_t end = vocabulary.first_byte_begin(edge.hi + 1u);
    for (size_t i = vocabulary.first_byte_begin(edge.lo); i < end;) {
      TokenMatch m = walker.match(pool, vocabulary.sorted_bytes(i));
      if (m.accepted) {
        accepted.push_back(vocabulary.sorted_id(i));
        ++i;
        continue;
      }
      size_t group_end = vocabulary.prefix_group_end(i, m.dead_prefix_len);
      if (m.left_rule) {
        for (size_t j = i; j < group_end; ++j) mask.uncertain.push_back(static_cast<uint32_t>(j));
      }
      i = group_end;
    }
  }
  if (accepted.size() * 32 >= vocabulary.size()) {
    mask.accepted_bitmask.assign(vocabulary.bitmask_words(), 0);
    for (int32_t id : accepted) mask.accepted_bitmask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  } else {
    mask.accepted_ids = std::move(accepted);
  }
  return mask;
}

}  // namespace

TokenMaskCache::TokenMaskCache(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, bool precompute_all,
                               unsigned num_threads)
    : pda_(pda), vocabulary_(vocabulary), classified_(new std::once_flag[pda.nodes.size()]), masks_(pda.nodes.size()) {
  if (!precompute_all) return;
  std::vector<uint32_t> scannable;
  for (uint32_t node = 0; node < pda.nodes.size(); ++node) {
    if (pda.scannable(node)) scannable.push_back(node);
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < scannable.size(); k = next++) at(scannable[k]);
  };
  unsigned threads = std::max(1u, std::min<unsigned>(num_threads, static_cast<unsigned>(scannable.size() / 4)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
}

const NodeTokenMask& TokenMaskCache::at(uint32_t node) const {
  std::call_once(classified_[node], [&] {
    if (!pda_.scannable(node)) return;
    TokenPrefixWalker walker(pda_);
    masks_[node] = classify_node(pda_, vocabulary_, node, walker);
  });
  return masks_[node];
}

size_t TokenMaskCache::memory_bytes() const {
  size_t total = masks_.size() * sizeof(NodeTokenMask);
  for (const auto& m : masks_) {
    total += m.accepted_bitmask.size() * 4 + m.accepted_ids.size() * 4 + m.uncertain.size() * 4;
  }
  return total;
}

size_t TokenMaskCache::num_uncertain() const {
  size_t total = 0;
  for (const auto& m : masks_) total += m.uncertain.size();
  return total;
}

}  // namespace tern::grammar
