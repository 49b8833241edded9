#include "gateway/prefix_tree.h"

#include <algorithm>
#include <queue>
#include <vector>

namespace tern::gateway {

namespace {

size_t common_prefix_len(std::string_view a, std::string_view b) {
  const size_t limit = std::min(a.size(), b.size());
  size_t len = 0;
  while (len < limit && a[len] == b[len]) ++len;
  return len;
}

}  // namespace

PrefixTree::PrefixTree(size_t max_chars) : max_chars_(max_chars), root_(std::make_unique<Node>()) {}

PrefixTree::~PrefixTree() = default;

size_t PrefixTree::match(std::string_view text) {
  const uint64_t now = ++clock_;
  Node* node = root_.get();
  node->last_used = now;
  size_t matched = 0;
  while (matched < text.size()) {
    auto it = node->children.find(text[matched]);
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const size_t len = common_prefix_len(child->edge, text.substr(matched));
    child->last_used = now;
    matched += len;
    if (len < child->edge.size()) break;
    node = child;
  }
  return matched;
}

void PrefixTree::insert(std::string_view text) {
  const uint64_t now = ++clock_;
  Node* node = root_.get();
  node->last_used = now;
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view rest = text.substr(pos);
    auto it = node->children.find(rest[0]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge = std::string(rest);
      leaf->parent = node;
      leaf->last_used = now;
      num_chars_ += rest.size();
      node->children.emplace(rest[0], std::move(leaf));
      break;
    }
    Node* child = it->second.get();
    const size_t len = common_prefix_len(child->edge, rest);
    if (len < child->edge.size()) {
      // Split the edge at the mismatch: a new inner node takes the common part, the old child keeps the rest.
      auto inner = std::make_unique<Node>();
      inner->edge = child->edge.substr(0, len);
      inner->parent = node;
      std::unique_ptr<Node> old_child = std::move(it->second);
      old_child->edge.erase(0, len);
      old_child->parent = inner.get();
      inner->children.emplace(old_child->edge[0], std::move(old_child));
      it->second = std::move(inner);
      child = it->second.get();
    }
    child->last_used = now;
    pos += len;
    node = child;
  }
  evict_to_bound();
}

void PrefixTree::evict_to_bound() {
  if (num_chars_ <= max_chars_) return;
  // Leaves in LRU order; a parent becomes a candidate once its last child is gone. Since a path is always touched
  // whole, removing the oldest leaf first never drops text that was used more recently than what stays.
  auto older = [](const Node* a, const Node* b) { return a->last_used > b->last_used; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(older)> leaves(older);
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (node->children.empty() && node != root_.get()) leaves.push(node);
    for (auto& [first, child] : node->children) stack.push_back(child.get());
  }
  while (num_chars_ > max_chars_ && !leaves.empty()) {
    Node* leaf = leaves.top();
    leaves.pop();
    Node* parent = leaf->parent;
    num_chars_ -= leaf->edge.size();
    parent->children.erase(leaf->edge[0]);
    if (parent != root_.get() && parent->children.empty()) leaves.push(parent);
  }
}

}  // namespace tern::gateway
