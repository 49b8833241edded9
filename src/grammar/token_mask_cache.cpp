#include "grammar/token_mask_cache.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

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

  std::optional<TokenMatch> match(std::string_view token) {
    size_t depth = 0;
    const size_t limit = std::min({path_len_, token.size(), previous_.size()});
    while (depth < limit && previous_[depth] == token[depth]) ++depth;
    previous_ = token;
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
  std::string_view previous_;  // (part of) a vocabulary entry, which outlives the walker
};

// Stores the accepted tokens as a bitmask when there are many, else as a list of ids (whichever is smaller).
void store_accepted(std::vector<int32_t> accepted, const TokenVocabulary& vocabulary, NodeTokenMask& mask) {
  if (accepted.size() * 32 >= vocabulary.size()) {
    auto bitmask = std::make_shared<std::vector<uint32_t>>(vocabulary.bitmask_words(), 0u);
    for (int32_t id : accepted) (*bitmask)[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    mask.accepted_bitmask = std::move(bitmask);
  } else {
    mask.accepted_ids = std::move(accepted);
  }
}

// No calls and not accepting: the node's closure is the node itself, so the DFA walker can start there.
bool closes_to_itself(const PdaNode& node) { return !node.accepting && node.num_call_edges == 0; }

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
      std::string_view token = vocabulary.sorted_bytes(i);
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
  store_accepted(std::move(accepted), vocabulary, mask);
  return mask;
}

// The same classification as classify_node for a node with a wide region, from the region's shared walk: tokens
// that end or die inside the region are decided by the walk; those that leave it continue from this node's exit
// with the stack-aware walker (after the exit byte the state is the closure of the exit node).
NodeTokenMask classify_wide_node(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary,
                                 const RegionTokenWalk& walk, const std::vector<uint32_t>& exit_nodes) {
  NodeTokenMask mask;
  std::vector<int32_t> accepted;
  FramePool pool;
  PdaStepper stepper(pda);
  TokenPrefixWalker walker(pda);
  for (size_t k = 0; k < walk.exits.size();) {
    const uint32_t exit = walk.exits[k].exit;
    const uint32_t target = exit_nodes[exit];
    std::vector<Stack> entered;
    StepResult entry;
    stepper.closure(pool, {target, kOpenFrame}, entered, entry);
    walker.reset(std::move(entered), entry.reached_open);
    std::optional<DfaTokenWalker> dfa_walker;
    if (closes_to_itself(pda.nodes[target])) dfa_walker.emplace(pda, target);
    for (; k < walk.exits.size() && walk.exits[k].exit == exit; ++k) {
      const RegionExit& e = walk.exits[k];
      std::string_view rest = vocabulary.sorted_bytes(e.sorted_index).substr(e.consumed);
      std::optional<TokenMatch> m;
      if (rest.empty()) {
        m = TokenMatch{true, 0, false};
      } else if (dfa_walker) {
        m = dfa_walker->match(rest);
      }
      if (!m) m = walker.match(pool, rest);
      if (m->accepted) {
        accepted.push_back(vocabulary.sorted_id(e.sorted_index));
      } else if (m->left_rule) {
        mask.uncertain.push_back(e.sorted_index);
      }
    }
  }
  std::sort(mask.uncertain.begin(), mask.uncertain.end());
  if (walk.accepted_bitmask) {
    mask.accepted_bitmask = walk.accepted_bitmask;  // shared, plus this node's own accepted exits
    mask.accepted_ids = std::move(accepted);
  } else {
    accepted.insert(accepted.end(), walk.accepted.begin(), walk.accepted.end());
    store_accepted(std::move(accepted), vocabulary, mask);
  }
  return mask;
}

// Runs work(k) for k in [0, n) on up to num_threads threads.
template <typename Work>
void parallel_for(size_t n, unsigned num_threads, const Work& work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < n; k = next++) work(k);
  };
  const unsigned threads = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(num_threads, n)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
}

}  // namespace

TokenMaskCache::TokenMaskCache(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, bool precompute_all,
                               unsigned num_threads, RegionWalkCache* region_walks)
    : pda_(pda), vocabulary_(vocabulary), classified_(new std::once_flag[pda.nodes.size()]), masks_(pda.nodes.size()) {
  // Nodes with a wide region are classified now, whatever precompute_all says: classifying one on first use would
  // walk nearly the whole vocabulary in the middle of a request (tens of ms), and with shared region walks doing
  // all of them costs about one walk per distinct region shape.
  struct WideNode {
    uint32_t node;
    std::vector<uint32_t> exit_nodes;
    size_t walk;  // index into walks
  };
  std::vector<WideNode> wide;
  std::vector<uint32_t> other;
  std::unordered_map<std::vector<uint32_t>, size_t, ShapeHash> walk_of_shape;
  std::vector<const std::vector<uint32_t>*> shapes;
  WideRegionExtractor extractor(pda);
  for (uint32_t node = 0; node < pda.nodes.size(); ++node) {
    if (!pda.scannable(node)) continue;
    std::optional<WideRegion> region = extractor.extract(node);
    if (!region) {
      if (precompute_all) other.push_back(node);
      continue;
    }
    auto [it, inserted] = walk_of_shape.emplace(std::move(region->shape), shapes.size());
    if (inserted) shapes.push_back(&it->first);
    wide.push_back({node, std::move(region->exit_nodes), it->second});
  }
  std::vector<std::shared_ptr<const RegionTokenWalk>> walks(shapes.size());
  parallel_for(shapes.size(), num_threads, [&](size_t k) {
    walks[k] = region_walks != nullptr ? region_walks->get(*shapes[k], vocabulary)
                                       : std::make_shared<const RegionTokenWalk>(walk_wide_region(*shapes[k], vocabulary));
  });
  parallel_for(wide.size(), num_threads, [&](size_t k) {
    const WideNode& w = wide[k];
    std::call_once(classified_[w.node],
                   [&] { masks_[w.node] = classify_wide_node(pda, vocabulary, *walks[w.walk], w.exit_nodes); });
  });
  // The wide nodes count here, a bitmask shared by the nodes of one region once; at() counts the others.
  size_t bytes = masks_.size() * (sizeof(NodeTokenMask) + sizeof(std::once_flag));
  std::unordered_set<const std::vector<uint32_t>*> bitmasks;
  for (const WideNode& w : wide) {
    const NodeTokenMask& m = masks_[w.node];
    if (m.accepted_bitmask && bitmasks.insert(m.accepted_bitmask.get()).second) bytes += m.accepted_bitmask->size() * 4;
    bytes += (m.accepted_ids.size() + m.uncertain.size()) * 4;
  }
  memory_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  parallel_for(other.size(), num_threads, [&](size_t k) { at(other[k]); });
}

const NodeTokenMask& TokenMaskCache::at(uint32_t node) const {
  std::call_once(classified_[node], [&] {
    if (!pda_.scannable(node)) return;
    TokenPrefixWalker walker(pda_);
    const NodeTokenMask& m = masks_[node] = classify_node(pda_, vocabulary_, node, walker);
    size_t bytes = (m.accepted_ids.size() + m.uncertain.size()) * 4;
    if (m.accepted_bitmask) bytes += m.accepted_bitmask->size() * 4;
    memory_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  });
  return masks_[node];
}

size_t TokenMaskCache::num_uncertain() const {
  size_t total = 0;
  for (const auto& m : masks_) total += m.uncertain.size();
  return total;
}

}  // namespace tern::grammar
