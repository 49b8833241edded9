#pragma once
// NCCL, loaded at run time rather than linked: the binary must start on machines without NCCL (every single-GPU
// deployment), and NCCL usually comes with the GPU machine's PyTorch rather than as a system package, where no
// static archive exists. TERN_NCCL_LIBRARY names the file; otherwise libnccl.so.2 is looked up the usual way.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

namespace tern::cuda {

struct NcclLibrary {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  // Point-to-point, for the all-to-all of data-parallel MoE layers: sends and receives between group_start and
  // group_end run as one operation, so no rank waits on a peer that is itself waiting.
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;

  // Loads the library once; fails naming the file and the dynamic loader's reason.
  static const NcclLibrary& get();
  void check(ncclResult_t status, const char* what) const;
};

// One communicator per device 0 .. size - 1 of this process (ncclCommInitAll): the ranks are threads of one
// process, so no id has to travel between processes.
class NcclGroup {
 public:
  explicit NcclGroup(int size);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  ncclComm_t comm(int rank) const { return comms_.at(static_cast<size_t>(rank)); }
  const NcclLibrary& library() const { return library_; }

 private:
  const NcclLibrary& library_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace tern::cuda
