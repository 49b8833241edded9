#include "backend/shared_buffer.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tern {

std::vector<uint8_t> encode_shared_handle(std::string_view kind, std::span<const uint8_t> body) {
  std::vector<uint8_t> handle(kind.begin(), kind.end());
  handle.push_back(0);
  handle.insert(handle.end(), body.begin(), body.end());
  return handle;
}

std::span<const uint8_t> decode_shared_handle(std::span<const uint8_t> handle, std::string_view kind) {
  const auto end = std::find(handle.begin(), handle.end(), uint8_t{0});
  const std::string given(handle.begin(), end);
  if (end == handle.end() || given != kind) {
    fail("shared buffer: the other instance shares '{}' memory; this backend opens '{}' (run both instances on "
         "the same kind of backend)", given.substr(0, 32), kind);
  }
  return handle.subspan(static_cast<size_t>(end - handle.begin()) + 1);
}

}  // namespace tern
