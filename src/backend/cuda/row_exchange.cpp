#include "backend/cuda/row_exchange.h"

#include <cuda_bf16.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/tensor_info.h"
#include "elementwise/pointwise.h"
#include "moe/add_rows.h"

namespace tern::cuda {

namespace {

void refuse_capture(cudaStream_t stream, const char* op) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  if (status != cudaStreamCaptureStatusNone) {
    fail("cuda backend: {} reads host values (the data-parallel token exchange) and cannot be recorded in a CUDA "
         "graph; data-parallel steps run eagerly",
         op);
  }
}

int32_t checked_int32(int64_t v, const char* op, const char* what) {
  if (v < 0 || v > INT32_MAX) fail("{}: {} = {} is outside [0, 2^31)", op, what, v);
  return static_cast<int32_t>(v);
}

// Host int32 values in a new device tensor, through the pinned ring (the backend's usual upload path).
Tensor upload(const RankStream& on, std::span<const int32_t> values) {
  Tensor out = on.allocator.allocate(DType::I32, {static_cast<int64_t>(values.size())});
  on.staging.upload(out.data, values.data(), values.size_bytes(), on.stream);
  return out;
}

size_t row_bytes(const Tensor& x) { return static_cast<size_t>(x.row_numel()) * dtype_size(x.dtype); }

template <typename Out, typename In>
void add_rows_as(Tensor& out, const Tensor& x, const kernels::RowsByTarget& rows, cudaStream_t stream) {
  launch("add_rows", [&] {
    kernels::launch_add_rows(out.ptr<Out>(), x.ptr<In>(), out.row_numel(), rows, stream);
  });
}

}  // namespace

Tensor all_to_all_rows(const RankStream& on, const NcclGroup& group, int rank, const Tensor& x,
                       std::span<const int64_t> send_counts, std::vector<int64_t>& received_counts) {
  refuse_capture(on.stream, "all_to_all_rows");
  if (x.shape.empty()) fail("all_to_all_rows: expects rows [S, ...]");
  const int size = group.size();
  if (static_cast<int>(send_counts.size()) != size) {
    fail("all_to_all_rows: {} send counts for a group of {} ranks", send_counts.size(), size);
  }
  int64_t num_sent = 0;
  for (int64_t count : send_counts) num_sent += checked_int32(count, "all_to_all_rows", "a send count");
  if (num_sent != x.size(0)) fail("all_to_all_rows: send counts add up to {} rows, x has {}", num_sent, x.size(0));
  const size_t bytes_per_row = row_bytes(x);

  // Every rank's counts for every rank, and its row size: [size, size + 1] after the all-gather.
  const size_t entries = static_cast<size_t>(size) + 1;
  std::vector<int32_t> mine(entries);
  for (int r = 0; r < size; ++r) mine[r] = static_cast<int32_t>(send_counts[r]);
  mine[size] = checked_int32(static_cast<int64_t>(bytes_per_row), "all_to_all_rows", "the row size in bytes");
  const Tensor local = upload(on, mine);
  const Tensor gathered = on.allocator.allocate(DType::I32, {size, static_cast<int64_t>(entries)});
  const NcclLibrary& nccl = group.library();
  nccl.check(nccl.all_gather(local.data, gathered.data, entries, ncclInt32, group.comm(rank), on.stream),
             "ncclAllGather (all_to_all_rows counts)");
  std::vector<int32_t> table(static_cast<size_t>(size) * entries);
  check(cudaMemcpyAsync(table.data(), gathered.data, table.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        on.stream),
        "all_to_all_rows (counts)");
  check(cudaStreamSynchronize(on.stream), "all_to_all_rows (counts)");

  received_counts.assign(static_cast<size_t>(size), 0);
  int64_t num_received = 0;
  for (int source = 0; source < size; ++source) {
    const int32_t* row = table.data() + static_cast<size_t>(source) * entries;
    // Every rank sees the same table, so a mismatch fails on all of them rather than leaving some in NCCL.
    if (static_cast<size_t>(row[size]) != bytes_per_row) {
      fail("all_to_all_rows: rank {} sends rows of {} bytes, rank {} of {} (every rank must send one dtype and width)",
           source, row[size], rank, bytes_per_row);
    }
    received_counts[source] = row[rank];
    num_received += row[rank];
  }
  std::vector<int64_t> shape = x.shape;
  shape[0] = num_received;
  Tensor out = on.allocator.allocate(x.dtype, std::move(shape));

  // Rows for rank r follow the rows for the ranks before it; rows from rank r follow those from the ranks before.
  const auto* send = x.ptr<const char>();
  auto* receive = out.ptr<char>();
  std::vector<size_t> send_offsets(static_cast<size_t>(size)), receive_offsets(static_cast<size_t>(size));
  for (int r = 1; r < size; ++r) {
    send_offsets[r] = send_offsets[r - 1] + static_cast<size_t>(send_counts[r - 1]) * bytes_per_row;
    receive_offsets[r] = receive_offsets[r - 1] + static_cast<size_t>(received_counts[r - 1]) * bytes_per_row;
  }
  const size_t own_bytes = static_cast<size_t>(send_counts[rank]) * bytes_per_row;
  if (own_bytes > 0) {
    check(cudaMemcpyAsync(receive + receive_offsets[rank], send + send_offsets[rank], own_bytes,
                          cudaMemcpyDeviceToDevice, on.stream),
          "all_to_all_rows (own rows)");
  }
  // Both sides of every pair know its count, so a zero-byte pair is skipped by both.
  nccl.check(nccl.group_start(), "ncclGroupStart (all_to_all_rows)");
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const size_t send_bytes = static_cast<size_t>(send_counts[peer]) * bytes_per_row;
    const size_t receive_bytes = static_cast<size_t>(received_counts[peer]) * bytes_per_row;
    if (send_bytes > 0) {
      nccl.check(nccl.send(send + send_offsets[peer], send_bytes, ncclUint8, peer, group.comm(rank), on.stream),
                 "ncclSend (all_to_all_rows)");
    }
    if (receive_bytes > 0) {
      nccl.check(nccl.recv(receive + receive_offsets[peer], receive_bytes, ncclUint8, peer, group.comm(rank),
                           on.stream),
                 "ncclRecv (all_to_all_rows)");
    }
  }
  nccl.check(nccl.group_end(), "ncclGroupEnd (all_to_all_rows)");
  return out;
}

Tensor select_rows(const RankStream& on, const Tensor& x, std::span<const int32_t> rows) {
  Tensor out = on.allocator.allocate(x.dtype, selected_rows_shape(x, rows.size()));
  select_rows_into(on, x, rows, out);
  return out;
}

void select_rows_into(const RankStream& on, const Tensor& x, std::span<const int32_t> rows, Tensor& out) {
  refuse_capture(on.stream, "select_rows");
  check_select_rows_into(x, rows, out);
  if (rows.empty() || row_bytes(x) == 0) return;
  const Tensor device_rows = upload(on, rows);
  launch("select_rows", [&] {
    kernels::launch_gather_rows(x.data, device_rows.ptr<int32_t>(), out.data, out.size(0),
                                static_cast<int64_t>(row_bytes(x)), on.stream);
  });
}

void add_rows(const RankStream& on, Tensor& out, const Tensor& x, std::span<const int32_t> targets) {
  refuse_capture(on.stream, "add_rows");
  const auto float_type = [](const Tensor& t) { return t.dtype == DType::F32 || t.dtype == DType::BF16; };
  if (!float_type(out) || !float_type(x)) {
    fail("add_rows: adds float32 or bf16 rows, got {} rows into {}", dtype_name(x.dtype), dtype_name(out.dtype));
  }
  const int64_t width = out.row_numel();
  const int64_t num_rows = x.shape.empty() ? 0 : x.size(0);
  if (out.shape.empty() || x.row_numel() != width || num_rows != static_cast<int64_t>(targets.size())) {
    fail("add_rows: {} target rows of width {} for rows {} of width {}", targets.size(), width, shape_string(x.shape),
         x.row_numel());
  }
  const int64_t num_out_rows = out.size(0);
  // The sources of each target, ascending (a counting sort by target keeps the index order within a target).
  std::vector<int32_t> sources_per_row(static_cast<size_t>(num_out_rows), 0);
  for (int32_t target : targets) {
    if (target < 0 || target >= num_out_rows) fail("add_rows: row {} outside [0, {})", target, num_out_rows);
    ++sources_per_row[target];
  }
  if (targets.empty() || width == 0) return;
  // One upload: target_rows [G], source_begin [G + 1], sources [N].
  std::vector<int32_t> target_rows, first_source(static_cast<size_t>(num_out_rows));
  std::vector<int32_t> source_begin{0};
  for (int64_t row = 0; row < num_out_rows; ++row) {
    if (sources_per_row[row] == 0) continue;
    first_source[row] = source_begin.back();
    target_rows.push_back(static_cast<int32_t>(row));
    source_begin.push_back(source_begin.back() + sources_per_row[row]);
  }
  std::vector<int32_t> sources(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) sources[first_source[targets[i]]++] = static_cast<int32_t>(i);
  const size_t num_targets = target_rows.size();
  std::vector<int32_t> packed;
  packed.reserve(num_targets + source_begin.size() + sources.size());
  packed.insert(packed.end(), target_rows.begin(), target_rows.end());
  packed.insert(packed.end(), source_begin.begin(), source_begin.end());
  packed.insert(packed.end(), sources.begin(), sources.end());
  const Tensor device = upload(on, packed);
  const int32_t* base = device.ptr<int32_t>();
  const kernels::RowsByTarget rows{base, base + num_targets, base + num_targets + source_begin.size(),
                                   static_cast<int>(num_targets)};
  using bf16 = __nv_bfloat16;
  const bool out_f32 = out.dtype == DType::F32, x_f32 = x.dtype == DType::F32;
  if (out_f32 && x_f32) add_rows_as<float, float>(out, x, rows, on.stream);
  else if (out_f32) add_rows_as<float, bf16>(out, x, rows, on.stream);
  else if (x_f32) add_rows_as<bf16, float>(out, x, rows, on.stream);
  else add_rows_as<bf16, bf16>(out, x, rows, on.stream);
}

}  // namespace tern::cuda
