#include "grammar/wide_region.h"

#include <algorithm>
#include <string_view>

namespace tern::grammar {
namespace {

// A node is broad when its edges take at least this many byte values: string contents and free-text classes (and
// the UTF-8 continuation nodes inside them, 16-64 values). Keys, literals, digits and JSON structure are not; their
// tokens die within a byte or two and are cheap to classify directly.
constexpr unsigned kBroadByteValues = 16;
// How deep (in bytes) a region reaches from its start. Regions of a bounded repetition (a string with maxLength)
// differ only near the repetition's end, so cutting them at a fixed depth makes the positions far from the end the
// same shape; the few tokens longer than the cut (about 1% of a 128K-152K vocabulary) leave through the cut.
constexpr uint32_t kMaxRegionDepth = 16;
constexpr uint32_t kDead = UINT32_MAX;

bool plain(const PdaNode& n) { return !n.accepting && n.num_call_edges == 0 && n.num_byte_edges != 0; }

unsigned byte_values(const PushdownAutomaton& pda, const PdaNode& n) {
  unsigned values = 0;
  for (uint32_t e = 0; e < n.num_byte_edges; ++e) {
    const ByteEdge& edge = pda.byte_edges[n.first_byte_edge + e];
    values += edge.hi - edge.lo + 1u;
  }
  return values;
}

enum NodeKind : uint8_t { kOther, kBroad, kGate };

// A gate takes exactly one byte (the quote that must close a string of maximal length, a separator in a format).
// Regions include gates but leave through their edge: near the end of a bounded string nearly every token dies at
// the gate, inside the shared walk, instead of leaving the region one by one.
NodeKind node_kind(const PushdownAutomaton& pda, const PdaNode& n) {
  if (!plain(n)) return kOther;
  if (byte_values(pda, n) >= kBroadByteValues) return kBroad;
  const ByteEdge& first = pda.byte_edges[n.first_byte_edge];
  return n.num_byte_edges == 1 && first.lo == first.hi ? kGate : kOther;
}

// The shape as a dense table: region node * 256 + byte -> region node, kRegionExit | exit index, or kDead.
std::vector<uint32_t> transition_table(const std::vector<uint32_t>& shape) {
  std::vector<uint32_t> table;
  for (size_t pos = 0, node = 0; pos < shape.size(); ++node) {
    table.resize((node + 1) * 256, kDead);
    uint32_t num_edges = shape[pos++];
    for (uint32_t e = 0; e < num_edges; ++e, pos += 2) {
      uint32_t lo = shape[pos] & 0xFF, hi = shape[pos] >> 8;
      std::fill(table.begin() + static_cast<ptrdiff_t>(node * 256 + lo),
                table.begin() + static_cast<ptrdiff_t>(node * 256 + hi + 1), shape[pos + 1]);
    }
  }
  return table;
}

}  // namespace

WideRegionExtractor::WideRegionExtractor(const PushdownAutomaton& pda)
    : pda_(pda), kind_(pda.nodes.size()), mark_(pda.nodes.size(), 0), index_(pda.nodes.size(), 0) {
  for (size_t node = 0; node < pda.nodes.size(); ++node) kind_[node] = node_kind(pda, pda.nodes[node]);
}

std::optional<WideRegion> WideRegionExtractor::extract(uint32_t node) {
  if (kind_[node] != kBroad) return std::nullopt;
  // A region pays off from a broad node most of whose bytes stay in it (string contents); a broad node whose bytes
  // mostly leave at once (after the digits of a number: digits, '.', 'e', ',', '}', whitespace) would only hand
  // its tokens to the exits.
  const PdaNode& start = pda_.nodes[node];
  unsigned staying = 0;
  for (uint32_t e = 0; e < start.num_byte_edges; ++e) {
    const ByteEdge& edge = pda_.byte_edges[start.first_byte_edge + e];
    if (kind_[edge.target] != kOther) staying += edge.hi - edge.lo + 1u;
  }
  if (staying < kBroadByteValues) return std::nullopt;

  ++extraction_;
  WideRegion region;
  std::vector<uint32_t> order{node}, depth{0};
  mark_[node] = extraction_;
  index_[node] = 0;
  auto exit_to = [&](uint32_t target) {
    if (mark_[target] != extraction_) {
      mark_[target] = extraction_;
      index_[target] = kRegionExit | static_cast<uint32_t>(region.exit_nodes.size());
      region.exit_nodes.push_back(target);
    }
    return index_[target];
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const PdaNode& n = pda_.nodes[order[k]];
    const bool is_gate = kind_[order[k]] == kGate;
    region.shape.push_back(n.num_byte_edges);
    for (uint32_t e = 0; e < n.num_byte_edges; ++e) {
      const ByteEdge& edge = pda_.byte_edges[n.first_byte_edge + e];
      uint32_t target;
      if (is_gate) {
        target = exit_to(edge.target);
      } else if (mark_[edge.target] == extraction_) {
        target = index_[edge.target];  // a region node, or a node already made an exit
      } else if (depth[k] + 1 < kMaxRegionDepth && kind_[edge.target] != kOther) {
        target = static_cast<uint32_t>(order.size());
        mark_[edge.target] = extraction_;
        index_[edge.target] = target;
        order.push_back(edge.target);
        depth.push_back(depth[k] + 1);
      } else {
        target = exit_to(edge.target);
      }
      region.shape.push_back(edge.lo | uint32_t{edge.hi} << 8);
      region.shape.push_back(target);
    }
  }
  return region;
}

RegionTokenWalk walk_wide_region(const std::vector<uint32_t>& shape, const TokenVocabulary& vocabulary) {
  const std::vector<uint32_t> table = transition_table(shape);
  RegionTokenWalk walk;
  // Tokens come in sorted order, so each reuses the path of its common prefix with the previous token walked (from
  // the vocabulary's lcp array, kept as a running minimum over skipped tokens): every byte of the vocabulary's trie
  // is stepped at most once. path[d] is the region node after the first d bytes of the previous token, valid for
  // d <= valid.
  std::vector<uint32_t> path{0};
  for (unsigned byte = 0; byte < 256; ++byte) {
    if (table[byte] == kDead) continue;  // the whole first-byte range dies at once
    const size_t end = vocabulary.first_byte_begin(byte + 1);
    size_t valid = 0;
    for (size_t i = vocabulary.first_byte_begin(byte); i < end;) {
      std::string_view token = vocabulary.sorted_bytes(i);
      size_t depth = std::min<size_t>(valid, token.size());
      if (path.size() < token.size() + 1) path.resize(token.size() + 1);
      uint32_t next = 0;
      for (; depth < token.size(); ++depth) {
        next = table[size_t{path[depth]} * 256 + static_cast<uint8_t>(token[depth])];
        if (next & kRegionExit) break;
        path[depth + 1] = next;
      }
      valid = depth;
      size_t j = i + 1;
      if (depth == token.size()) {
        walk.accepted.push_back(vocabulary.sorted_id(i));
      } else {
        // Every token sharing the first depth + 1 bytes dies or leaves at the same byte.
        while (j < end && vocabulary.lcp_with_previous(j) > depth) ++j;
        if (next != kDead) {
          for (size_t k = i; k < j; ++k) {
            walk.exits.push_back({static_cast<uint32_t>(k), static_cast<uint32_t>(depth + 1), next & ~kRegionExit});
          }
        }
      }
      if (j < end) valid = std::min<size_t>(valid, vocabulary.lcp_with_previous(j));
      i = j;
    }
  }
  std::stable_sort(walk.exits.begin(), walk.exits.end(),
                   [](const RegionExit& a, const RegionExit& b) { return a.exit < b.exit; });
  if (walk.accepted.size() * 32 >= vocabulary.size()) {
    auto bitmask = std::make_shared<std::vector<uint32_t>>(vocabulary.bitmask_words(), 0u);
    for (int32_t id : walk.accepted) (*bitmask)[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    walk.accepted_bitmask = std::move(bitmask);
    walk.accepted = {};
  }
  return walk;
}

}  // namespace tern::grammar
