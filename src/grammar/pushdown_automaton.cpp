#include "grammar/pushdown_automaton.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/nesting_limit.h"
#include "grammar/utf8_ranges.h"

namespace tern::grammar {
namespace {

void collect_refs(const Expr& expr, std::vector<uint32_t>& out) {
  if (expr.kind == ExprKind::kRuleRef) out.push_back(expr.rule);
  for (const auto& child : expr.children) collect_refs(child, out);
}

// Rules on a reference cycle must stay rules of the PDA; every other rule can be inlined. `callee_first` receives
// every rule, each after all the rules it refers to outside its own cycle (the order Tarjan completes components).
std::vector<bool> find_recursive_rules(const Grammar& grammar, std::vector<uint32_t>& callee_first) {
  size_t n = grammar.rules.size();
  std::vector<std::vector<uint32_t>> refs(n);
  for (size_t r = 0; r < n; ++r) collect_refs(grammar.rules[r].body, refs[r]);
  // Tarjan's strongly connected components, iteratively to survive deep grammars.
  std::vector<int> index(n, -1), low(n, 0);
  std::vector<bool> on_stack(n, false), recursive(n, false);
  std::vector<uint32_t> stack;
  int counter = 0;
  for (uint32_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    std::vector<std::pair<uint32_t, size_t>> work{{root, 0}};
    while (!work.empty()) {
      auto& [v, child] = work.back();
      if (child == 0) {
        index[v] = low[v] = counter++;
        stack.push_back(v);
        on_stack[v] = true;
      }
      if (child < refs[v].size()) {
        uint32_t w = refs[v][child++];
        if (w == v) recursive[v] = true;
        if (index[w] < 0) {
          work.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        std::vector<uint32_t> component;
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component.push_back(w);
          callee_first.push_back(w);
        } while (w != v);
        if (component.size() > 1) {
          for (uint32_t c : component) recursive[c] = true;
        }
      }
      uint32_t finished = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[finished]);
    }
  }
  return recursive;
}

size_t saturating_mul(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / 4 / b ? SIZE_MAX / 4 : a * b; }

struct NfaEdge {
  enum Kind : uint8_t { kEpsilon, kByte, kCall } kind = kEpsilon;
  uint8_t lo = 0;
  uint8_t hi = 0;
  uint32_t rule = 0;  // kCall: PDA rule
  uint32_t target = 0;
};

class PdaBuilder {
 public:
  PdaBuilder(const Grammar& grammar, const PdaLimits& limits)
      : grammar_(grammar), limits_(limits), inline_size_(grammar.rules.size(), 0), kept_called_(grammar.rules.size(), false) {
    std::vector<uint32_t> callee_first;
    recursive_ = find_recursive_rules(grammar, callee_first);
    // Callees first, so that sizing a rule reads its callees' sizes instead of recursing into them: a chain of
    // thousands of rules, each referring to the next, would otherwise recurse once per rule.
    for (uint32_t rule : callee_first) {
      inline_size_[rule] = expanded_size(grammar_.rules[rule].body);
      // A rule that would expand past rule_max_states (an object with a hundred long strings, an array of up to 64
      // such objects) calls its largest callees instead of copying them: each is then built once, for all callers.
      while (inline_size_[rule] > limits_.rule_max_states) {
        uint32_t largest = largest_inlined_callee(grammar_.rules[rule].body);
        if (largest == kNoRule) break;
        kept_called_[largest] = true;
        inline_size_[rule] = expanded_size(grammar_.rules[rule].body);
      }
    }
  }

  PushdownAutomaton build() {
    pda_.root_rule = pda_rule_of(grammar_.root);
    for (size_t r = 0; r < pda_rules_.size(); ++r) build_rule(r);  // build_rule may append rules
    compute_distances();
    prune_dead_edges();
    check_left_recursion();
    return std::move(pda_);
  }

 private:
  // Estimated NFA states of an expression once its inlinable rule references are inlined.
  size_t expanded_size(const Expr& expr) {
    switch (expr.kind) {
      case ExprKind::kEmpty: return 1;
      case ExprKind::kLiteral: return expr.literal.size() + 1;
      case ExprKind::kCharClass: return 4 * expr.ranges.size() + 1;
      case ExprKind::kRuleRef: return inlines(expr.rule) ? inline_size_[expr.rule] : 1;
      case ExprKind::kSequence:
      case ExprKind::kChoice: {
        size_t total = 1;
        for (const auto& child : expr.children) total = std::min(total + expanded_size(child), SIZE_MAX / 4);
        return total;
      }
      case ExprKind::kRepeat: {
        size_t copies = expr.max_repeat == kUnboundedRepeat ? std::max<size_t>(expr.min_repeat, 1) + 1 : expr.max_repeat;
        return saturating_mul(expanded_size(expr.children[0]), copies) + 2;
      }
    }
    return 1;
  }

  bool inlines(uint32_t rule) {
    return !recursive_[rule] && !kept_called_[rule] && inline_size_[rule] <= limits_.inline_rule_max_states;
  }

  static constexpr uint32_t kNoRule = UINT32_MAX;

  // The inlined rule referenced in `expr` (not through other rules: those are sized already) with the largest
  // expansion; kNoRule where none is worth a call.
  uint32_t largest_inlined_callee(const Expr& expr) {
    constexpr size_t kMinCalledStates = 64;
    uint32_t largest = kNoRule;
    std::vector<const Expr*> work{&expr};
    while (!work.empty()) {
      const Expr* e = work.back();
      work.pop_back();
      if (e->kind == ExprKind::kRuleRef) {
        if (inlines(e->rule) && inline_size_[e->rule] >= kMinCalledStates &&
            (largest == kNoRule || inline_size_[e->rule] > inline_size_[largest])) {
          largest = e->rule;
        }
        continue;
      }
      for (const auto& child : e->children) work.push_back(&child);
    }
    return largest;
  }

  uint32_t pda_rule_of(uint32_t grammar_rule) {
    auto [it, inserted] = pda_rule_ids_.emplace(grammar_rule, static_cast<uint32_t>(pda_rules_.size()));
    if (inserted) {
      pda_rules_.push_back(grammar_rule);
      pda_.rule_names.push_back(grammar_.rules[grammar_rule].name);
    }
    return it->second;
  }

  uint32_t new_state() {
    if (++total_nfa_states_ > limits_.max_nfa_states) {
      fail("grammar too large: more than {} automaton states after expanding repetitions and rules", limits_.max_nfa_states);
    }
    nfa_.emplace_back();
    return static_cast<uint32_t>(nfa_.size() - 1);
  }

  void add_edge(uint32_t from, NfaEdge edge) { nfa_[from].push_back(edge); }
  void epsilon(uint32_t from, uint32_t to) { add_edge(from, {NfaEdge::kEpsilon, 0, 0, 0, to}); }

  // Adds NFA states and edges so that the strings of `expr` lead from `from` to `to`. `depth` counts the calls of
  // this function above this one.
  void build_expr(const Expr& expr, uint32_t from, uint32_t to, int depth) {
    switch (expr.kind) {
      case ExprKind::kEmpty: epsilon(from, to); return;
      case ExprKind::kLiteral: {
        uint32_t cur = from;
        for (size_t i = 0; i < expr.literal.size(); ++i) {
          uint32_t next = i + 1 == expr.literal.size() ? to : new_state();
          auto byte = static_cast<uint8_t>(expr.literal[i]);
          add_edge(cur, {NfaEdge::kByte, byte, byte, 0, next});
          cur = next;
        }
        return;
      }
      case ExprKind::kCharClass:
        for (const auto& seq : utf8_sequences(expr.ranges)) {
          uint32_t cur = from;
          for (int i = 0; i < seq.len; ++i) {
            uint32_t next = i + 1 == seq.len ? to : new_state();
            add_edge(cur, {NfaEdge::kByte, seq.lo[i], seq.hi[i], 0, next});
            cur = next;
          }
        }
        return;
      case ExprKind::kRuleRef:
        // Inlining recurses into the callee's body; where that would pass kMaxNestingDepth (a long chain of rules
        // each inlined into the one before) the callee stays a call, which the PDA's own stack handles.
        if (inlines(expr.rule) && depth + 1 + static_cast<int>(grammar_.rules[expr.rule].body.depth) <= kMaxNestingDepth) {
          build_expr(grammar_.rules[expr.rule].body, from, to, depth + 1);
        } else {
          add_edge(from, {NfaEdge::kCall, 0, 0, pda_rule_of(expr.rule), to});
        }
        return;
      case ExprKind::kSequence: {
        uint32_t cur = from;
        for (size_t i = 0; i < expr.children.size(); ++i) {
          uint32_t next = i + 1 == expr.children.size() ? to : new_state();
          build_expr(expr.children[i], cur, next, depth + 1);
          cur = next;
        }
        return;
      }
      case ExprKind::kChoice:
        for (const auto& child : expr.children) {
          // A fresh entry state keeps loops inside one alternative from leaking into the others.
          uint32_t entry = new_state();
          epsilon(from, entry);
          build_expr(child, entry, to, depth + 1);
        }
        return;
      case ExprKind::kRepeat: {
        const Expr& body = expr.children[0];
        uint32_t cur = from;
        bool unbounded = expr.max_repeat == kUnboundedRepeat;
        uint32_t optional_copies = unbounded ? 0 : expr.max_repeat - expr.min_repeat;
        for (uint32_t i = 0; i < expr.min_repeat; ++i) {
          uint32_t next = new_state();
          build_expr(body, cur, next, depth + 1);
          cur = next;
        }
        if (unbounded) {
          uint32_t loop = new_state();
          epsilon(cur, loop);
          uint32_t body_end = new_state();
          build_expr(body, loop, body_end, depth + 1);
          epsilon(body_end, loop);
          epsilon(loop, to);
          return;
        }
        for (uint32_t i = 0; i < optional_copies; ++i) {
          epsilon(cur, to);
          uint32_t next = new_state();
          build_expr(body, cur, next, depth + 1);
          cur = next;
        }
        epsilon(cur, to);
        return;
      }
    }
  }

  void epsilon_closure(std::vector<uint32_t>& set) {
    std::vector<uint32_t> work = set;
    while (!work.empty()) {
      uint32_t s = work.back();
      work.pop_back();
      for (const auto& e : nfa_[s]) {
        if (e.kind == NfaEdge::kEpsilon && !in_set_[e.target]) {
          in_set_[e.target] = true;
          set.push_back(e.target);
          work.push_back(e.target);
        }
      }
    }
    for (uint32_t s : set) in_set_[s] = false;
    std::sort(set.begin(), set.end());
  }

  struct SetHash {
    size_t operator()(const std::vector<uint32_t>& v) const {
      size_t h = v.size();
      for (uint32_t x : v) h = h * 1000003u ^ x;
      return h;
    }
  };

  // Subset construction of one PDA rule's NFA into DFA nodes appended to pda_.
  void build_rule(size_t pda_rule) {
    nfa_.clear();
    uint32_t start = new_state();
    uint32_t end = new_state();
    build_expr(grammar_.rules[pda_rules_[pda_rule]].body, start, end, 0);
    in_set_.assign(nfa_.size(), false);

    std::unordered_map<std::vector<uint32_t>, uint32_t, SetHash> dfa_ids;
    std::vector<std::vector<uint32_t>> dfa_sets;
    uint32_t base = static_cast<uint32_t>(pda_.nodes.size());
    auto dfa_node = [&](std::vector<uint32_t> set) {
      epsilon_closure(set);
      auto [it, inserted] = dfa_ids.emplace(set, static_cast<uint32_t>(dfa_sets.size()));
      if (inserted) {
        if (pda_.nodes.size() + dfa_sets.size() >= limits_.max_dfa_states) {
          fail("grammar too large: more than {} automaton states in rule '{}'", limits_.max_dfa_states,
               pda_.rule_names[pda_rule]);
        }
        dfa_sets.push_back(std::move(set));
      }
      return base + it->second;
    };
    pda_.rule_start.push_back(dfa_node({start}));

    for (size_t d = 0; d < dfa_sets.size(); ++d) {
      std::vector<const NfaEdge*> byte_edges;
      std::map<uint32_t, std::vector<uint32_t>> call_targets;
      bool accepting = false;
      for (uint32_t s : dfa_sets[d]) {
        if (s == end) accepting = true;
        for (const auto& e : nfa_[s]) {
          if (e.kind == NfaEdge::kByte) byte_edges.push_back(&e);
          if (e.kind == NfaEdge::kCall) call_targets[e.rule].push_back(e.target);
        }
      }
      std::vector<uint32_t> cuts;
      for (const auto* e : byte_edges) {
        cuts.push_back(e->lo);
        cuts.push_back(e->hi + 1u);
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      std::vector<ByteEdge> out_edges;
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        std::vector<uint32_t> targets;
        for (const auto* e : byte_edges) {
          if (e->lo <= cuts[c] && cuts[c] <= e->hi) targets.push_back(e->target);
        }
        if (targets.empty()) continue;
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        uint32_t target = dfa_node(std::move(targets));
        auto lo = static_cast<uint8_t>(cuts[c]);
        auto hi = static_cast<uint8_t>(cuts[c + 1] - 1);
        if (!out_edges.empty() && out_edges.back().target == target && out_edges.back().hi + 1 == lo) {
          out_edges.back().hi = hi;
        } else {
          out_edges.push_back({lo, hi, target});
        }
      }
      std::vector<CallEdge> out_calls;
      for (auto& [rule, targets] : call_targets) {
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        out_calls.push_back({rule, dfa_node(std::move(targets))});
      }
      PdaNode node;
      node.rule = static_cast<uint32_t>(pda_rule);
      node.accepting = accepting;
      node.first_byte_edge = static_cast<uint32_t>(pda_.byte_edges.size());
      node.num_byte_edges = static_cast<uint32_t>(out_edges.size());
      node.first_call_edge = static_cast<uint32_t>(pda_.call_edges.size());
      node.num_call_edges = static_cast<uint32_t>(out_calls.size());
      pda_.byte_edges.insert(pda_.byte_edges.end(), out_edges.begin(), out_edges.end());
      pda_.call_edges.insert(pda_.call_edges.end(), out_calls.begin(), out_calls.end());
      pda_.nodes.push_back(node);
    }
  }

  // Shortest distance (in bytes) from every node to its rule's end, with callees at their shortest; iterated to a
  // fixed point because a rule's shortest length depends on its callees'.
  void compute_distances() {
    size_t n = pda_.nodes.size();
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> reverse(n);  // node -> (predecessor, callee or kNoNode)
    for (uint32_t u = 0; u < n; ++u) {
      const PdaNode& node = pda_.nodes[u];
      for (uint32_t i = 0; i < node.num_byte_edges; ++i) reverse[pda_.byte_edges[node.first_byte_edge + i].target].push_back({u, kNoNode});
      for (uint32_t i = 0; i < node.num_call_edges; ++i) {
        const CallEdge& call = pda_.call_edges[node.first_call_edge + i];
        reverse[call.return_node].push_back({u, call.rule});
      }
    }
    std::vector<uint32_t> rule_min(pda_.rule_start.size(), kUnreachable);
    for (;;) {
      std::vector<uint32_t> dist(n, kUnreachable);
      using Item = std::pair<uint32_t, uint32_t>;
      std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
      for (uint32_t u = 0; u < n; ++u) {
        if (pda_.nodes[u].accepting) {
          dist[u] = 0;
          heap.push({0, u});
        }
      }
      while (!heap.empty()) {
        auto [d, v] = heap.top();
        heap.pop();
        if (d != dist[v]) continue;
        for (auto [u, callee] : reverse[v]) {
          uint32_t weight = callee == kNoNode ? 1 : rule_min[callee];
          if (weight == kUnreachable) continue;
          uint32_t candidate = d + weight;
          if (candidate < dist[u]) {
            dist[u] = candidate;
            heap.push({candidate, u});
          }
        }
      }
      bool changed = false;
      for (size_t r = 0; r < rule_min.size(); ++r) {
        if (dist[pda_.rule_start[r]] != rule_min[r]) {
          rule_min[r] = dist[pda_.rule_start[r]];
          changed = true;
        }
      }
      if (!changed) {
        for (uint32_t u = 0; u < n; ++u) pda_.nodes[u].min_bytes_to_rule_end = dist[u];
        rule_min_ = rule_min;
        return;
      }
    }
  }

  // Edges into parts that can never finish would let the matcher walk into a dead end; drop them.
  void prune_dead_edges() {
    if (rule_min_[pda_.root_rule] == kUnreachable) {
      fail("invalid grammar: rule '{}' matches no finite string", pda_.rule_names[pda_.root_rule]);
    }
    std::vector<ByteEdge> byte_edges;
    std::vector<CallEdge> call_edges;
    for (auto& node : pda_.nodes) {
      uint32_t first_byte = static_cast<uint32_t>(byte_edges.size());
      uint32_t first_call = static_cast<uint32_t>(call_edges.size());
      for (uint32_t i = 0; i < node.num_byte_edges; ++i) {
        const ByteEdge& e = pda_.byte_edges[node.first_byte_edge + i];
        if (pda_.nodes[e.target].min_bytes_to_rule_end != kUnreachable) byte_edges.push_back(e);
      }
      for (uint32_t i = 0; i < node.num_call_edges; ++i) {
        const CallEdge& e = pda_.call_edges[node.first_call_edge + i];
        if (rule_min_[e.rule] != kUnreachable && pda_.nodes[e.return_node].min_bytes_to_rule_end != kUnreachable) {
          call_edges.push_back(e);
        }
      }
      node.first_byte_edge = first_byte;
      node.num_byte_edges = static_cast<uint32_t>(byte_edges.size()) - first_byte;
      node.first_call_edge = first_call;
      node.num_call_edges = static_cast<uint32_t>(call_edges.size()) - first_call;
    }
    pda_.byte_edges = std::move(byte_edges);
    pda_.call_edges = std::move(call_edges);
  }

  // A rule that can call itself before consuming a byte would make the matcher's closure infinite.
  void check_left_recursion() {
    size_t num_rules = pda_.rule_start.size();
    std::vector<std::vector<uint32_t>> left_calls(num_rules);
    for (uint32_t r = 0; r < num_rules; ++r) {
      std::vector<uint32_t> work{pda_.rule_start[r]};
      std::vector<bool> seen(pda_.nodes.size(), false);
      seen[work[0]] = true;
      while (!work.empty()) {
        const PdaNode& node = pda_.nodes[work.back()];
        work.pop_back();
        for (uint32_t i = 0; i < node.num_call_edges; ++i) {
          const CallEdge& call = pda_.call_edges[node.first_call_edge + i];
          left_calls[r].push_back(call.rule);
          if (rule_min_[call.rule] == 0 && !seen[call.return_node]) {
            seen[call.return_node] = true;
            work.push_back(call.return_node);
          }
        }
      }
    }
    // Depth-first search for a cycle, iteratively: a chain of thousands of rules, each calling the next first,
    // is a valid grammar.
    std::vector<int> color(num_rules, 0);  // 0 unvisited, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;  // rule, index of its next left call to follow
    for (uint32_t root = 0; root < num_rules; ++root) {
      if (color[root] != 0) continue;
      color[root] = 1;
      path.push_back({root, 0});
      while (!path.empty()) {
        auto& [r, next_call] = path.back();
        if (next_call == left_calls[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        uint32_t callee = left_calls[r][next_call++];
        if (color[callee] == 1) fail("invalid grammar: left recursion through rule '{}'", pda_.rule_names[callee]);
        if (color[callee] == 0) {
          color[callee] = 1;
          path.push_back({callee, 0});
        }
      }
    }
  }

  const Grammar& grammar_;
  PdaLimits limits_;
  std::vector<bool> recursive_;
  std::vector<size_t> inline_size_;
  std::vector<bool> kept_called_;  // rules that stay calls so that a caller stays within rule_max_states
  std::unordered_map<uint32_t, uint32_t> pda_rule_ids_;
  std::vector<uint32_t> pda_rules_;  // PDA rule -> grammar rule
  std::vector<std::vector<NfaEdge>> nfa_;
  std::vector<bool> in_set_;
  size_t total_nfa_states_ = 0;
  std::vector<uint32_t> rule_min_;
  PushdownAutomaton pda_;
};

}  // namespace

PushdownAutomaton build_pushdown_automaton(const Grammar& grammar, const PdaLimits& limits) {
  return PdaBuilder(grammar, limits).build();
}

}  // namespace tern::grammar
