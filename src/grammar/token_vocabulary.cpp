#include "grammar/token_vocabulary.h"

#include <algorithm>

#include "core/error.h"

namespace tern::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_token_ids)
    : token_bytes_(std::move(token_bytes)), eos_ids_(std::move(eos_token_ids)) {
  for (int32_t id : eos_ids_) {
    if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) {
      fail("grammar vocabulary: EOS token id {} is outside the vocabulary of {} tokens", id, token_bytes_.size());
    }
  }
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    if (!token_bytes_[id].empty() && !is_eos(static_cast<int32_t>(id))) sorted_ids_.push_back(static_cast<int32_t>(id));
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  sorted_offsets_.reserve(sorted_ids_.size() + 1);
  sorted_offsets_.push_back(0);
  for (int32_t id : sorted_ids_) {
    sorted_blob_ += bytes(id);
    sorted_offsets_.push_back(sorted_blob_.size());
  }
  lcp_.resize(sorted_ids_.size(), 0);
  for (size_t i = 1; i < sorted_ids_.size(); ++i) {
    std::string_view a = sorted_bytes(i - 1);
    std::string_view b = sorted_bytes(i);
    size_t n = std::min(a.size(), b.size()), k = 0;
    while (k < n && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<uint32_t>(k);
  }
  first_byte_begin_.assign(257, sorted_ids_.size());
  for (size_t i = sorted_ids_.size(); i-- > 0;) first_byte_begin_[static_cast<uint8_t>(sorted_bytes(i)[0])] = i;
  for (int b = 255; b >= 0; --b) first_byte_begin_[b] = std::min(first_byte_begin_[b], first_byte_begin_[b + 1]);
  // FNV-1a over the bytes and EOS ids: identifies the vocabulary in grammar cache keys.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint8_t byte) { h = (h ^ byte) * 1099511628211ull; };
  for (const auto& token : token_bytes_) {
    for (char c : token) mix(static_cast<uint8_t>(c));
    mix(0xFF);
    mix(static_cast<uint8_t>(token.size()));
  }
  for (int32_t id : eos_ids_) {
    for (int k = 0; k < 4; ++k) mix(static_cast<uint8_t>(id >> (8 * k)));
  }
  fingerprint_ = h;
}

bool TokenVocabulary::is_eos(int32_t id) const { return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end(); }

size_t TokenVocabulary::prefix_group_end(size_t sorted_index, size_t prefix_len) const {
  // Tokens sharing the prefix are contiguous: binary search for the first one that differs within prefix_len.
  std::string_view prefix = sorted_bytes(sorted_index).substr(0, prefix_len);
  size_t lo = sorted_index + 1, hi = sorted_ids_.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (sorted_bytes(mid).substr(0, prefix.size()) == prefix) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace tern::grammar
