// The CPU kernels' instruction set: the processor's best unless $TERN_CPU_ISA forces one, and a clear error for a
// name that is unknown or that the processor lacks.
#include "backend/cpu/cpu_isa.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"

namespace tern::cpu {
namespace {

TEST(CpuIsa, UnsetPicksTheBestTheProcessorHas) {
  EXPECT_EQ(select_cpu_isa(std::nullopt, true), CpuIsa::kAvx512);
  EXPECT_EQ(select_cpu_isa(std::nullopt, false), CpuIsa::kAvx2);
  EXPECT_EQ(select_cpu_isa("", true), CpuIsa::kAvx512);
}

TEST(CpuIsa, ForcedVariantIsTaken) {
  EXPECT_EQ(select_cpu_isa("avx2", true), CpuIsa::kAvx2);
  EXPECT_EQ(select_cpu_isa("avx2", false), CpuIsa::kAvx2);
  EXPECT_EQ(select_cpu_isa("avx512", true), CpuIsa::kAvx512);
}

TEST(CpuIsa, AVariantTheProcessorLacksOrAnUnknownNameFailsNamingIt) {
  try {
    select_cpu_isa("avx512", false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no AVX-512"), std::string::npos) << e.what();
  }
  try {
    select_cpu_isa("avx-512", true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'avx-512': expected avx2 or avx512"), std::string::npos) << e.what();
  }
}

TEST(CpuIsa, TheBackendIsNamedAfterTheVariantAndKeepsItsKvCacheInHostMemory) {
  const auto backend = make_cpu_backend();
  EXPECT_EQ(backend->name(), std::string("cpu-") + cpu_isa_name(cpu_isa()));
  EXPECT_EQ(backend->description().rfind(backend->name() + ", ", 0), 0u) << backend->description();
  EXPECT_NE(backend->description().find(" thread"), std::string::npos) << backend->description();
  EXPECT_TRUE(backend->kv_cache_in_host_memory());
}

TEST(BackendChoice, AutoIsCudaOnlyWhereADeviceAnswers) {
  EXPECT_EQ(resolve_backend_name("auto"), cuda_device_count() > 0 ? "cuda" : "cpu");
  EXPECT_EQ(resolve_backend_name("cpu"), "cpu");
  EXPECT_EQ(resolve_backend_name("cuda"), "cuda");
  EXPECT_THROW(make_backend("gpu"), Error);
}

}  // namespace
}  // namespace tern::cpu
