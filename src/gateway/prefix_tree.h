#pragma once
// An approximate radix tree of the request texts sent to one replica, as SGLang's router keeps: it stands in for
// the replica's prefix cache without asking the replica, so it works on characters (bytes) rather than tokens and
// forgets by its own LRU size bound rather than by the replica's evictions.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace tern::gateway {

class PrefixTree {
 public:
  explicit PrefixTree(size_t max_chars);
  ~PrefixTree();
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  // Bytes of the longest prefix of `text` held in the tree; marks the matched path as recently used.
  size_t match(std::string_view text);
  // Adds `text`, marks its path as recently used, then evicts least recently used leaves while the tree holds
  // more than max_chars bytes.
  void insert(std::string_view text);

  // Bytes on all edges: what the tree holds.
  size_t num_chars() const { return num_chars_; }
  size_t max_chars() const { return max_chars_; }

 private:
  struct Node {
    std::string edge;  // the bytes on the edge from the parent; empty only at the root
    Node* parent = nullptr;
    std::map<char, std::unique_ptr<Node>> children;  // keyed by the first byte of the child's edge
    uint64_t last_used = 0;  // never older than any descendant's: a path is touched whole
  };

  void evict_to_bound();

  size_t max_chars_;
  size_t num_chars_ = 0;
  uint64_t clock_ = 0;
  std::unique_ptr<Node> root_;
};

}  // namespace tern::gateway
