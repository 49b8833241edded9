#include "backend/cuda/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <numeric>
#include <string>

#include "core/error.h"

namespace tern::cuda {

namespace {

template <typename Function>
void bind(void* handle, const char* symbol, const std::string& file, Function& out) {
  out = reinterpret_cast<Function>(dlsym(handle, symbol));
  if (!out) fail("NCCL: {} has no symbol {}", file, symbol);
}

NcclLibrary load() {
  const char* configured = std::getenv("TERN_NCCL_LIBRARY");
  const std::string file = configured && *configured ? configured : "libnccl.so.2";
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = dlerror();
    fail("NCCL is needed for --tensor-parallel-size or --data-parallel-size > 1 on CUDA and could not be loaded "
         "from {}: {} (set TERN_NCCL_LIBRARY to the path of libnccl.so.2)",
         file, reason ? reason : "unknown error");
  }
  NcclLibrary library;
  bind(handle, "ncclGetVersion", file, library.get_version);
  bind(handle, "ncclGetErrorString", file, library.error_string);
  bind(handle, "ncclCommInitAll", file, library.comm_init_all);
  bind(handle, "ncclCommDestroy", file, library.comm_destroy);
  bind(handle, "ncclAllReduce", file, library.all_reduce);
  bind(handle, "ncclAllGather", file, library.all_gather);
  bind(handle, "ncclSend", file, library.send);
  bind(handle, "ncclRecv", file, library.recv);
  bind(handle, "ncclGroupStart", file, library.group_start);
  bind(handle, "ncclGroupEnd", file, library.group_end);
  int version = 0;
  library.check(library.get_version(&version), "ncclGetVersion");
  // bfloat16 reductions arrived in NCCL 2.10.
  if (version < 21000) fail("NCCL: {} is version {}; tern needs 2.10 or later", file, version);
  return library;  // the handle stays open for the life of the process
}

}  // namespace

const NcclLibrary& NcclLibrary::get() {
  static const NcclLibrary library = load();
  return library;
}

void NcclLibrary::check(ncclResult_t status, const char* what) const {
  if (status != ncclSuccess) fail("NCCL: {}: {}", what, error_string ? error_string(status) : "error");
}

NcclGroup::NcclGroup(int size) : library_(NcclLibrary::get()) {
  int num_devices = 0;
  if (cudaGetDeviceCount(&num_devices) != cudaSuccess) num_devices = 0;
  if (size < 1 || size > num_devices) {
    fail("a group of {} ranks (tensor- or data-parallel size) needs that many GPUs; {} found", size, num_devices);
  }
  // NVLink SHARP (multicast) can take a host's GPUs out of service on the machines tern is tested on; it is not
  // needed for the small messages of decode.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::vector<int> devices(static_cast<size_t>(size));
  std::iota(devices.begin(), devices.end(), 0);
  comms_.resize(devices.size());
  library_.check(library_.comm_init_all(comms_.data(), size, devices.data()), "ncclCommInitAll");
}

NcclGroup::~NcclGroup() {
  for (ncclComm_t comm : comms_) library_.comm_destroy(comm);
}

}  // namespace tern::cuda
