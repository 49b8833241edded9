#include "backend/backend.h"
#include "core/error.h"

namespace tern {

std::unique_ptr<Backend> make_backend(const std::string& name, int num_threads) {
  if (name == "cpu") return make_cpu_backend(num_threads);
  if (name == "cuda") {
#ifdef TERN_CUDA
    return make_cuda_backend(0);
#else
    fail("backend 'cuda': this tern was built without CUDA (configure with -DTERN_CUDA=ON)");
#endif
  }
  fail("unknown backend '{}' (expected cpu or cuda)", name);
}

}  // namespace tern
