// A CUPTI injection library that records every kernel and memory copy a CUDA program runs, CUDA graph replays
// included, for the per-step profiles in docs/BENCHMARKS.md:
//   CUDA_INJECTION64_PATH=libtern_kernel_trace.so TERN_KERNEL_TRACE=trace.tsv tern bench ...
// then scripts/gpu/kernel_trace_summary.py trace.tsv. The CUDA driver loads the library and calls
// InitializeInjection before the program's first CUDA call (CUPTI's injection mechanism), so the traced program
// needs no change. Records are buffered by CUPTI and written at exit, one line each:
//   start_ns  end_ns  stream  kind  grid  block  name
// (kind: kernel or memcpy/memset; grid "x,y,z"; names demangled, template arguments kept).
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = 8u << 20;

std::mutex output_mutex;
FILE* output = nullptr;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(result, &message);
  std::fprintf(stderr, "tern kernel trace: %s failed: %s\n", what, message ? message : "?");
  std::exit(1);
}

std::string demangled(const char* name) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> readable(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                                       &std::free);
  return status == 0 && readable ? std::string(readable.get()) : std::string(name);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void write_record(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      std::fprintf(output, "%llu\t%llu\t%u\tkernel\t%d,%d,%d\t%d,%d,%d\t%s\n",
                   static_cast<unsigned long long>(kernel->start), static_cast<unsigned long long>(kernel->end),
                   kernel->streamId, kernel->gridX, kernel->gridY, kernel->gridZ, kernel->blockX, kernel->blockY,
                   kernel->blockZ, demangled(kernel->name).c_str());
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      std::fprintf(output, "%llu\t%llu\t%u\tmemcpy\t-\t-\tmemcpy kind %u, %llu bytes\n",
                   static_cast<unsigned long long>(copy->start), static_cast<unsigned long long>(copy->end),
                   copy->streamId, static_cast<unsigned>(copy->copyKind),
                   static_cast<unsigned long long>(copy->bytes));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* set = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      std::fprintf(output, "%llu\t%llu\t%u\tmemset\t-\t-\tmemset %llu bytes\n",
                   static_cast<unsigned long long>(set->start), static_cast<unsigned long long>(set->end),
                   set->streamId, static_cast<unsigned long long>(set->bytes));
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  {
    std::lock_guard lock(output_mutex);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) write_record(record);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0)
      std::fprintf(stderr, "tern kernel trace: %zu records dropped\n", dropped);
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(output_mutex);
  if (output) std::fclose(output);
  output = nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  const char* path = std::getenv("TERN_KERNEL_TRACE");
  output = std::fopen(path && *path ? path : "kernel_trace.tsv", "w");
  if (!output) {
    std::perror("tern kernel trace: cannot open the output file");
    return 0;
  }
  std::fprintf(output, "start_ns\tend_ns\tstream\tkind\tgrid\tblock\tname\n");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset records");
  std::atexit(flush_at_exit);
  return 1;
}
