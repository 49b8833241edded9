#include "grammar/token_mask_cache.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "grammar/token_prefix_walker.h"

namespace tern::grammar {
namespace {

// Steps tokens through the plain-DFA part of a rule with single node transitions: while every node reached has no
// call edges and is not accepting (so no path can leave the rule or enter another), the state after each byte is
// one node, not a set of stacks. Most tokens of most nodes (string contents, numbers, keys) never leave that part;
// the others return nullopt and go to the general walker. `path[d]` is the node after the first d bytes of the
// previous token, for the first `path_len` + 1 entries.
class DfaTokenWalker {
 public:
  DfaTokenWalker(const PushdownAutomaton& pda, uint32_t start) : pda_(pda), path_{start} {}

  std::optional<TokenMatch> match(const std::string& token) {
    size_t depth = 0;
    if (previous_ != nullptr) {
      const size_t limit = std::min({path_len_, token.size(), previous_->size()});
      while (depth < limit && (*previous_)[depth] == token[depth]) ++depth;
    }
    previous_ = &token;
    path_.resize(std::max(path_.size(), token.size() + 1));
    for (; depth < token.size(); ++depth) {
      const uint32_t next = pda_.next(path_[depth], static_cast<uint8_t>(token[depth]));
      path_len_ = depth;
      if (next == kNoNode) return TokenMatch{false, depth + 1, false};
      const PdaNode& node = pda_.nodes[next];
      if (node.accepting || node.num_call_edges != 0) return std::nullopt;
      path_[depth + 1] = next;
    }
    path_len_ = token.size();
    return TokenMatch{true, 0, false};
  }

 private:
  const PushdownAutomaton& pda_;
  std::vector<uint32_t> path_;
  size_t path_len_ = 0;
  const std::string* previous_ = nullptr;  // a vocabulary entry, which outlives the walker
};

NodeTokenMask classify_node(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, uint32_t node,
                            TokenPrefixWalker& walker) {
  FramePool pool;
  walker.reset({{node, kOpenFrame}});
  DfaTokenWalker dfa_walker(pda, node);
  std::vector<int32_t> accepted;
  NodeTokenMask mask;
  const PdaNode& n = pda.nodes[node];
  for (uint32_t e = 0; e < n.num_byte_edges; ++e) {
    const ByteEdge& edge = pda.byte_edges[n.first_byte_edge + e];
    size_t end = vocabulary.first_byte_begin(edge.hi + 1u);
    for (size_t i = vocabulary.first_byte_begin(edge.lo); i < end;) {
      const std::string& token = vocabulary.sorted_bytes(i);
      std::optional<TokenMatch> fast = dfa_walker.match(token);
      TokenMatch m = fast ? *fast : walker.match(pool, token);
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
