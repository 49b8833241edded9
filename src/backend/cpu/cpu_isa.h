#pragma once
// The instruction set the CPU kernels run with: AVX-512 where the processor has it, else AVX2 (the x86-64-v3
// baseline the binary is built for). $TERN_CPU_ISA forces one ("avx2" or "avx512"), so that every variant can be
// tested on a machine that has AVX-512 and a machine without it refuses the forced one clearly.
#include <optional>
#include <string_view>

namespace tern::cpu {

enum class CpuIsa { kAvx2, kAvx512 };

const char* cpu_isa_name(CpuIsa isa);

// The variant for `forced` ($TERN_CPU_ISA: empty or unset picks the best the processor has). Throws tern::Error for
// an unknown name or one the processor lacks.
CpuIsa select_cpu_isa(std::optional<std::string_view> forced, bool has_avx512);

// The process's choice, made once from $TERN_CPU_ISA and the processor (throws as select_cpu_isa does).
CpuIsa cpu_isa();

}  // namespace tern::cpu
