#pragma once
// The vocabulary as the grammar engine sees it: token id -> raw bytes, plus the end-of-sequence ids. The grammar
// layer does not depend on the tokenizer; callers hand it the bytes (special tokens as empty strings, never allowed
// by a grammar). Tokens are also kept sorted by bytes so that tokens sharing a prefix share the work of matching it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tern::grammar {

class TokenVocabulary {
 public:
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_token_ids);

  size_t size() const { return token_bytes_.size(); }
  size_t bitmask_words() const { return (token_bytes_.size() + 31) / 32; }
  const std::string& bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  uint64_t fingerprint() const { return fingerprint_; }

  // Non-empty, non-EOS tokens sorted by bytes; "sorted index" below means a position in this list.
  size_t num_sorted() const { return sorted_ids_.size(); }
  int32_t sorted_id(size_t sorted_index) const { return sorted_ids_[sorted_index]; }
  // Sorted tokens are stored back to back, so that walking them in order reads memory in order.
  std::string_view sorted_bytes(size_t sorted_index) const {
    return std::string_view(sorted_blob_).substr(sorted_offsets_[sorted_index],
                                                 sorted_offsets_[sorted_index + 1] - sorted_offsets_[sorted_index]);
  }
  // Length of the common prefix of sorted tokens sorted_index - 1 and sorted_index (0 for the first).
  uint32_t lcp_with_previous(size_t sorted_index) const { return lcp_[sorted_index]; }
  // Sorted indices [first_byte_begin(b), first_byte_begin(b + 1)) are the tokens whose first byte is b.
  size_t first_byte_begin(unsigned byte) const { return first_byte_begin_[byte]; }
  // First sorted index after sorted_index whose token does not start with the first prefix_len bytes of it.
  size_t prefix_group_end(size_t sorted_index, size_t prefix_len) const;

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> eos_ids_;
  std::vector<int32_t> sorted_ids_;
  std::string sorted_blob_;
  std::vector<size_t> sorted_offsets_;  // num_sorted() + 1 entries into sorted_blob_
  std::vector<uint32_t> lcp_;
  std::vector<size_t> first_byte_begin_;  // 257 entries
  uint64_t fingerprint_ = 0;
};

}  // namespace tern::grammar
