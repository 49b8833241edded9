#include "common/tensor_map.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace tern::kernels {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
      throw std::runtime_error(std::string("tensor map: the driver has no cuTensorMapEncodeTiled: ") +
                               cudaGetErrorString(err));
    }
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

}  // namespace

CUtensorMap bf16_tensor_map_3d_swizzle128(const void* base, const uint64_t (&dims)[3],
                                          const uint64_t (&byte_strides)[2], const uint32_t (&box)[3]) {
  static_assert(std::is_same_v<cuuint64_t, uint64_t> && std::is_same_v<cuuint32_t, uint32_t>);
  CUtensorMap map{};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, byte_strides, box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw std::runtime_error("tensor map: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(result) + ")");
  }
  return map;
}

CUtensorMap byte_tensor_map_2d_swizzled(const void* base, uint64_t row_bytes, uint64_t rows, uint64_t row_stride,
                                        uint32_t box_bytes, uint32_t box_rows) {
  if (box_bytes != 64 && box_bytes != 128) {
    throw std::runtime_error("tensor map: swizzled boxes are 64 or 128 bytes wide, not " + std::to_string(box_bytes));
  }
  CUtensorMap map{};
  const cuuint64_t dims[2] = {row_bytes, rows};
  const cuuint64_t byte_strides[1] = {row_stride};
  const cuuint32_t box[2] = {box_bytes, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, byte_strides, box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw std::runtime_error("tensor map: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(result) + ")");
  }
  return map;
}

}  // namespace tern::kernels
