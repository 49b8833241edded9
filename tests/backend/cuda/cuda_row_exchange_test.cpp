// The ops of the data-parallel MoE token exchange on the CUDA backend (src/backend/cuda/row_exchange.*): the row
// gather and the scatter-add against the CPU backend on random rows (repeated and untouched targets, empty inputs;
// the sums must be the CPU's exactly, in its order), and their refusals. The all-to-all over two GPUs is in
// cuda_tensor_parallel_test.cpp.
#include <fmt/format.h>

#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;

// `count` row indices in [0, num_rows), with repeats.
std::vector<int32_t> random_rows(size_t count, int64_t num_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> rows(count);
  for (auto& row : rows) row = static_cast<int32_t>(rng() % num_rows);
  return rows;
}

class CudaRowExchangeTest : public testing::CudaVsCpuTest {};

// A data-parallel rank without tokens sends empty hidden-state rows of this dtype (SparseMoe), which must be the
// dtype of the other ranks' rows: the ops' outputs (all_to_all_rows refuses rows of another size).
TEST_F(CudaRowExchangeTest, ActivationDtypeIsTheDtypeOpsReturn) {
  const auto x = input(random_bf16_values(8, 1), {2, 4});
  const auto w = weight(random_bf16_values(4, 2), {4});
  EXPECT_EQ(gpu->rms_norm(x.gpu, w.gpu, 1e-6f).dtype, gpu->activation_dtype());
  EXPECT_EQ(gpu->activation_dtype(), DType::BF16);
}

TEST_F(CudaRowExchangeTest, SelectRowsMatchesCpuForEveryDtype) {
  for (auto [num_rows, width, count] : {std::tuple{7, 16, 12}, {40, 136, 3}, {5, 7, 9}, {1, 64, 4}, {9, 8, 0}}) {
    const std::string what = fmt::format("{} rows of {}, {} selected", num_rows, width, count);
    const auto rows = random_rows(static_cast<size_t>(count), num_rows, static_cast<uint32_t>(num_rows + width));
    const auto values = random_bf16_values(static_cast<size_t>(num_rows * width), 11);
    // bf16 (activations), float32 (router weights) and a 3-D float32 tensor: gathers whole rows.
    const auto bf16 = input(values, {num_rows, width});
    const Tensor cpu_rows = cpu->select_rows(bf16.cpu, rows);
    const Tensor gpu_bf16 = gpu->select_rows(bf16.gpu, rows);
    EXPECT_EQ(gpu_bf16.dtype, DType::BF16) << what;
    EXPECT_EQ(gpu_bf16.shape, cpu_rows.shape) << what;
    EXPECT_EQ(gpu->to_host_f32(gpu_bf16), cpu->to_host_f32(cpu_rows)) << what;
    const Tensor gpu_f32 = gpu->select_rows(gpu->from_host_f32(values, {num_rows, width}), rows);
    EXPECT_EQ(gpu->to_host_f32(gpu_f32), cpu->to_host_f32(cpu_rows)) << what;
    if (width % 2 == 0) {
      const std::vector<int64_t> shape3 = {num_rows, 2, width / 2};
      const Tensor gpu3 = gpu->select_rows(gpu->from_host_f32(values, shape3), rows);
      const Tensor cpu3 = cpu->select_rows(cpu->from_host_f32(values, shape3), rows);
      EXPECT_EQ(gpu3.shape, cpu3.shape) << what;
      EXPECT_EQ(gpu->to_host_f32(gpu3), cpu->to_host_f32(cpu3)) << what;
    }
    // int32 (routed expert slots).
    std::vector<int32_t> ids(static_cast<size_t>(num_rows * width));
    std::iota(ids.begin(), ids.end(), -5);
    EXPECT_EQ(gpu->to_host_i32(gpu->select_rows(gpu->from_host_i32(ids, {num_rows, width}), rows)),
              cpu->to_host_i32(cpu->select_rows(cpu->from_host_i32(ids, {num_rows, width}), rows)))
        << what;
  }
}

TEST_F(CudaRowExchangeTest, SelectRowsRejectsRowsOutsideTheTensor) {
  const Tensor x = gpu->from_host_f32(random_bf16_values(12, 1), {3, 4});
  EXPECT_THROW(gpu->select_rows(x, std::vector<int32_t>{0, 3}), Error);
  EXPECT_THROW(gpu->select_rows(x, std::vector<int32_t>{-1}), Error);
}

// Into the first rows of a buffer (a recorded step's input): the rows after them keep their values; a buffer of
// another dtype or width is refused.
TEST_F(CudaRowExchangeTest, SelectRowsIntoWritesTheFirstRowsOfABuffer) {
  const auto values = random_bf16_values(24, 3);
  const auto x = input(values, {6, 4});
  const std::vector<int32_t> rows = {5, 0, 5};
  Tensor buffer = gpu->select_rows(x.gpu, std::vector<int32_t>{1, 1, 1, 1, 1});
  Tensor first_rows = buffer.rows(0, 3);
  gpu->select_rows_into(x.gpu, rows, first_rows);
  std::vector<float> expected = cpu->to_host_f32(cpu->select_rows(x.cpu, rows));
  const std::vector<float> row_one(values.begin() + 4, values.begin() + 8);
  for (int r = 0; r < 2; ++r) expected.insert(expected.end(), row_one.begin(), row_one.end());
  EXPECT_EQ(gpu->to_host_f32(buffer), expected);
  Tensor float_rows = gpu->from_host_f32(std::vector<float>(12, 0.0f), {3, 4});
  EXPECT_THROW(gpu->select_rows_into(x.gpu, rows, float_rows), Error);
  Tensor narrow = buffer.reshape({10, 2}).rows(0, 3);
  EXPECT_THROW(gpu->select_rows_into(x.gpu, rows, narrow), Error);
}

// A copy (what a recorded step copies with: select_rows reads host values) takes writes without changing x.
TEST_F(CudaRowExchangeTest, CopyTakesWritesWithoutChangingItsSource) {
  const auto values = random_bf16_values(24, 5);
  const auto x = input(values, {2, 3, 4});
  Tensor copied = gpu->copy(x.gpu);
  EXPECT_EQ(copied.shape, x.gpu.shape);
  EXPECT_EQ(gpu->to_host_f32(copied), values);
  gpu->add_in_place(copied, x.gpu);
  std::vector<float> doubled = values;
  for (float& v : doubled) v *= 2.0f;
  EXPECT_EQ(gpu->to_host_f32(copied), doubled);
  EXPECT_EQ(gpu->to_host_f32(x.gpu), values);
}

// Rows of mixed magnitudes, so that adding them in another order than the CPU's changes the float32 sums.
std::vector<float> mixed_magnitudes(size_t n, uint32_t seed) {
  auto values = random_bf16_values(n, seed);
  for (size_t i = 0; i < n; i += 3) values[i] = bf16_to_f32(f32_to_bf16(values[i] * 4096.0f));
  return values;
}

TEST_F(CudaRowExchangeTest, AddRowsMatchesCpuSumsExactly) {
  // Many rows into few targets (every target repeated), rows into many targets (some untouched), and one row.
  for (auto [out_rows, width, count] : {std::tuple{3, 64, 40}, {50, 136, 20}, {8, 7, 8}, {1, 5120, 1}, {4, 96, 0}}) {
    const std::string what = fmt::format("{} rows of {} into {}", count, width, out_rows);
    const auto targets = random_rows(static_cast<size_t>(count), out_rows, static_cast<uint32_t>(count + width));
    const auto start = random_bf16_values(static_cast<size_t>(out_rows * width), 21);
    const auto rows = mixed_magnitudes(static_cast<size_t>(count * width), 22);
    Tensor cpu_out = cpu->from_host_f32(start, {out_rows, width});
    cpu->add_rows(cpu_out, cpu->from_host_f32(rows, {count, width}), targets);
    const std::vector<float> expected = cpu->to_host_f32(cpu_out);

    // float32 accumulators (what the MoE combine uses) with bf16 rows (the experts' outputs) or float32 rows.
    for (const bool bf16_rows : {true, false}) {
      Tensor out = gpu->from_host_f32(start, {out_rows, width});
      const Tensor x = bf16_rows ? weight_on(*gpu, rows, {count, width}) : gpu->from_host_f32(rows, {count, width});
      gpu->add_rows(out, x, targets);
      EXPECT_EQ(out.dtype, DType::F32);
      EXPECT_EQ(gpu->to_host_f32(out), expected) << what << (bf16_rows ? ", bf16 rows" : ", float32 rows");
    }
    // A bf16 accumulator: the float32 sum rounded once.
    Tensor out = weight_on(*gpu, start, {out_rows, width});
    gpu->add_rows(out, weight_on(*gpu, rows, {count, width}), targets);
    std::vector<float> rounded(expected.size());
    for (size_t i = 0; i < expected.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(expected[i]));
    EXPECT_EQ(gpu->to_host_f32(out), rounded) << what << ", bf16 out";
  }
}

TEST_F(CudaRowExchangeTest, AddRowsRejectsMismatchedRowsAndTargets) {
  Tensor out = gpu->from_host_f32(std::vector<float>(8, 0.0f), {2, 4});
  const Tensor x = gpu->from_host_f32(std::vector<float>(12, 1.0f), {3, 4});
  EXPECT_THROW(gpu->add_rows(out, x, std::vector<int32_t>{0, 1}), Error) << "3 rows for 2 targets";
  EXPECT_THROW(gpu->add_rows(out, x, std::vector<int32_t>{0, 2, 1}), Error) << "target outside the output";
  const Tensor narrow = gpu->from_host_f32(std::vector<float>(9, 1.0f), {3, 3});
  EXPECT_THROW(gpu->add_rows(out, narrow, std::vector<int32_t>{0, 1, 1}), Error) << "rows of another width";
  Tensor ids = gpu->from_host_i32(std::vector<int32_t>(8, 0), {2, 4});
  EXPECT_THROW(gpu->add_rows(ids, x, std::vector<int32_t>{0, 1, 1}), Error) << "int32 accumulator";
  // A rank with no tokens adds nothing into nothing.
  Tensor none = gpu->from_host_f32({}, {0, 4});
  gpu->add_rows(none, gpu->from_host_f32({}, {0, 4}), {});
  EXPECT_EQ(none.shape, (std::vector<int64_t>{0, 4}));
}

// A backend that is not part of a group has no peers to exchange rows with (as on the CPU backend).
TEST_F(CudaRowExchangeTest, AllToAllRowsNeedsAGroup) {
  std::vector<int64_t> received_counts;
  const Tensor x = gpu->from_host_f32(std::vector<float>(6, 1.0f), {3, 2});
  try {
    gpu->all_to_all_rows(x, std::vector<int64_t>{3}, received_counts);
    FAIL() << "all_to_all_rows ran without a group";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not part of a group"), std::string::npos) << e.what();
  }
}

// The ops take host row indices; recorded into a CUDA graph, a replay would reuse the recorded step's indices.
// So they refuse to be recorded (data-parallel steps, the only ones that call them, run eagerly): the eager run of
// a recorded step succeeds, its recording fails naming the op.
TEST_F(CudaRowExchangeTest, RowOpsRefuseToBeRecorded) {
  ForwardBatch batch;
  batch.token_ids = {0};
  batch.sequences.push_back({0, 1, {{0}}});
  batch.logit_rows = {0};
  const Tensor ids = gpu->from_host_i32(std::vector<int32_t>{7, 8}, {2});
  int eager_runs = 0;
  const StepForward select = [&](const StepContext&) {
    ++eager_runs;
    return StepOutputs{gpu->select_rows(ids, std::vector<int32_t>{1})};
  };
  try {
    gpu->run_recorded_step(batch, select);
    FAIL() << "select_rows was recorded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("select_rows reads host values"), std::string::npos) << e.what();
  }
  EXPECT_EQ(eager_runs, 2) << "one eager run, then the recording that fails";
  Tensor sums = gpu->from_host_f32(std::vector<float>(2, 0.0f), {2, 1});
  const Tensor one = gpu->from_host_f32(std::vector<float>{1.0f}, {1, 1});
  const StepForward add = [&](const StepContext&) {
    gpu->add_rows(sums, one, std::vector<int32_t>{1});
    return StepOutputs{ids.rows(0, 1)};
  };
  try {
    gpu->run_recorded_step(batch, add);
    FAIL() << "add_rows was recorded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_rows reads host values"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu->to_host_f32(sums), (std::vector<float>{0.0f, 1.0f})) << "the eager run added once";
}

}  // namespace
}  // namespace tern
