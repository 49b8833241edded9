#include "backend/backend.h"
#include "core/error.h"

namespace tern {

#ifndef TERN_CUDA
int cuda_device_count() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int) {
  fail("backend 'cuda': this tern was built without CUDA (configure with -DTERN_CUDA=ON)");
}

std::unique_ptr<BackendGroup> make_cuda_backend_group(int) {
  fail("backend 'cuda': this tern was built without CUDA (configure with -DTERN_CUDA=ON)");
}
#endif

std::string resolve_backend_name(const std::string& name) {
  if (name != "auto") return name;
  return cuda_device_count() > 0 ? "cuda" : "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& name, int num_threads) {
  const std::string resolved = resolve_backend_name(name);
  if (resolved == "cpu") return make_cpu_backend(num_threads);
  if (resolved == "cuda") return make_cuda_backend(0);
  fail("unknown backend '{}' (expected auto, cpu or cuda)", name);
}

std::unique_ptr<BackendGroup> make_backend_group(const std::string& name, int size, int num_threads) {
  if (size < 1) fail("tensor parallel size {} must be >= 1", size);
  const std::string resolved = resolve_backend_name(name);
  if (resolved == "cpu") return make_cpu_backend_group(size, num_threads);
  if (resolved == "cuda") return make_cuda_backend_group(size);
  fail("unknown backend '{}' (expected auto, cpu or cuda)", name);
}

}  // namespace tern
