#include "kvcache/kv_cache_budget.h"

#include <fstream>
#include <limits>
#include <stdexcept>
#include <utility>
#include <string>

#include "core/error.h"

namespace tern {

KvCacheBudget kv_cache_budget_for_memory(int64_t bytes_per_token, int32_t block_size, int64_t memory_bytes) {
  if (bytes_per_token <= 0) fail("kv cache budget: a token must cost some bytes, got {}", bytes_per_token);
  if (block_size <= 0) fail("kv cache budget: block size must be positive, got {}", block_size);
  KvCacheBudget budget{bytes_per_token, block_size, 0};
  const int64_t blocks = memory_bytes / budget.bytes_per_block();
  if (blocks < 1) {
    fail("kv cache budget: {} bytes hold no block of {} tokens at {} bytes per token ({} bytes a block)", memory_bytes,
         block_size, bytes_per_token, budget.bytes_per_block());
  }
  budget.num_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max()));
  return budget;
}

int64_t host_available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t value = 0;
  while (meminfo >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  fail("kv cache budget: /proc/meminfo has no MemAvailable line; give the KV cache memory in bytes instead");
}

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  size_t unit_start = 0;
  double number = 0;
  try {
    number = std::stod(text, &unit_start);
  } catch (const std::exception&) {
    fail("{}: '{}' is not a size (expected e.g. 2GiB, 512MiB or a byte count)", what, text);
  }
  const std::string unit = text.substr(unit_start);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},        {"B", 1.0},         {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      const double bytes = number * scale;
      if (!(bytes >= 0) || bytes > 9.0e18) fail("{}: '{}' is not a size in range", what, text);
      return static_cast<int64_t>(bytes);
    }
  }
  fail("{}: unknown unit '{}' in '{}' (use KiB, MiB, GiB, TiB, KB, MB, GB or TB)", what, unit, text);
}

}  // namespace tern
