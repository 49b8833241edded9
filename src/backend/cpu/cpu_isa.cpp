#include "backend/cpu/cpu_isa.h"

#include <cstdlib>

#include "core/error.h"

namespace tern::cpu {

const char* cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? "avx512" : "avx2"; }

CpuIsa select_cpu_isa(std::optional<std::string_view> forced, bool has_avx512) {
  if (!forced || forced->empty()) return has_avx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
  if (*forced == "avx2") return CpuIsa::kAvx2;
  if (*forced == "avx512") {
    if (!has_avx512) fail("TERN_CPU_ISA=avx512: this processor has no AVX-512 (avx512f and avx512bw); use avx2");
    return CpuIsa::kAvx512;
  }
  fail("TERN_CPU_ISA='{}': expected avx2 or avx512 (or unset: the best this processor has)", *forced);
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
    __builtin_cpu_init();
    const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    const char* forced = std::getenv("TERN_CPU_ISA");
    return select_cpu_isa(forced ? std::optional<std::string_view>(forced) : std::nullopt, has_avx512);
  }();
  return isa;
}

}  // namespace tern::cpu
