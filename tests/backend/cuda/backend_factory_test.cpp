// make_backend: the names it knows, and a clear error for the rest (and for "cuda" in a build without CUDA).
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"

namespace tern {
namespace {

TEST(BackendFactory, CpuByName) { EXPECT_EQ(make_backend("cpu", 1)->name().rfind("cpu", 0), 0u); }

TEST(BackendFactory, UnknownNameFails) {
  try {
    make_backend("tpu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tpu"), std::string::npos);
  }
}

#ifndef TERN_CUDA
TEST(BackendFactory, CudaFailsClearlyWithoutCuda) {
  try {
    make_backend("cuda");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without CUDA"), std::string::npos);
  }
}
#endif

}  // namespace
}  // namespace tern
