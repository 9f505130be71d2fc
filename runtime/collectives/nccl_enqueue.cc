// Step 2 of NcclCollectives::Run: enqueuing a rank's NCCL calls for each kind of collective on
// its stream, with the layout copies (nccl_layout_copies.h) that pack and place blocks along
// inner axes.

#include <cstddef>

#include "absl/strings/str_cat.h"
#include "core/balanced_split.h"
#include "core/data_type.h"
#include "device/cuda/cuda_status.h"
#include "runtime/collectives/nccl_collectives.h"
#include "runtime/collectives/nccl_layout_copies.h"

namespace loom::cuda {
namespace {

absl::StatusOr<ncclDataType_t> NcclDataType(plan::DataType data_type) {
  switch (data_type) {
    case plan::FLOAT32:
      return ncclFloat32;
    case plan::BFLOAT16:
      return ncclBfloat16;
    case plan::INT32:
      return ncclInt32;
    case plan::INT64:
      return ncclInt64;
    case plan::UINT8:
      return ncclUint8;
    default:
      return absl::UnimplementedError(
          absl::StrCat("NCCL does not reduce ", DataTypeName(data_type)));
  }
}

ncclRedOp_t NcclOperation(plan::ReduceOperation operation) {
  return operation == plan::REDUCE_MAX ? ncclMax : ncclSum;
}
}  // namespace

absl::Status NcclCollectives::Enqueue(const CollectiveCall& call,
                                      const std::vector<Shape>& input_shapes) {
  const RankState& state = ranks_[call.rank];
  if (absl::Status status =
          CudaStatus(cudaSetDevice(state.device), absl::StrCat(Where(call), "selecting the GPU"));
      !status.ok()) {
    return status;
  }
  if (DataTypeSize(call.input.data_type) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(call), "cannot move ", DataTypeName(call.input.data_type), " data"));
  }
  const plan::CollectiveConf& conf = *call.conf;
  switch (conf.kind()) {
    case plan::ALL_REDUCE: {
      const int64_t count = call.input.NumElements();
      if (count == 0) return absl::OkStatus();
      absl::StatusOr<ncclDataType_t> data_type = NcclDataType(call.input.data_type);
      if (!data_type.ok()) {
        return absl::UnimplementedError(absl::StrCat(Where(call), data_type.status().message()));
      }
      return Settle(
          call,
          ncclAllReduce(call.input.data, call.output.data, static_cast<size_t>(count), *data_type,
                        NcclOperation(conf.reduce()), state.comm, state.stream),
          "ncclAllReduce");
    }
    case plan::ALL_GATHER:
      return EnqueueAllGather(call, input_shapes);
    case plan::REDUCE_SCATTER:
      return EnqueueReduceScatter(call);
    case plan::ALL_TO_ALL:
      return EnqueueAllToAll(call, input_shapes);
    default:
      return absl::UnimplementedError(
          absl::StrCat(Where(call), "the NCCL backend does not run collective kind ", conf.kind()));
  }
}

absl::Status NcclCollectives::EnqueueAllGather(const CollectiveCall& call,
                                               const std::vector<Shape>& input_shapes) {
  const RankState& state = ranks_[call.rank];
  const int axis = call.conf->axis();
  const int64_t element_bytes = DataTypeSize(call.input.data_type);
  // Every input agrees outside `axis`: rank q's block is `outer` rows of length_q * inner
  // elements, which land at offset_q along `axis` in every row of the output.
  const AxisSplit own = SplitAt(call.input.shape, axis);
  const int64_t outer = own.outer;
  const int64_t inner_bytes = own.inner * element_bytes;
  std::vector<int64_t> offsets(size_);
  std::vector<int64_t> row_bytes(size_);
  int64_t total_length = 0;
  bool equal_blocks = true;
  for (int peer = 0; peer < size_; ++peer) {
    const int64_t length = SplitAt(input_shapes[peer], axis).length;
    offsets[peer] = total_length;
    row_bytes[peer] = length * inner_bytes;
    total_length += length;
    if (row_bytes[peer] != row_bytes[0]) equal_blocks = false;
  }
  // With one row the blocks lie one after another in the output; otherwise NCCL gathers them
  // into scratch memory, one after another, and copies place them row by row.
  const bool direct = outer == 1;
  StreamScratch scratch(state.stream);
  if (!direct) {
    if (absl::Status status = scratch.Allocate(outer * total_length * inner_bytes, Where(call));
        !status.ok()) {
      return status;
    }
  }
  std::byte* gathered = direct ? static_cast<std::byte*>(call.output.data) : scratch.data();
  auto block = [&](int peer) { return gathered + outer * offsets[peer] * inner_bytes; };
  if (equal_blocks) {
    const int64_t block_bytes = outer * row_bytes[0];
    if (block_bytes > 0) {
      if (absl::Status status =
              Settle(call,
                     ncclAllGather(call.input.data, gathered, static_cast<size_t>(block_bytes),
                                   ncclUint8, state.comm, state.stream),
                     "ncclAllGather");
          !status.ok()) {
        return status;
      }
    }
  } else {
    // Blocks of different sizes: each rank broadcasts its own.
    if (ncclResult_t result = ncclGroupStart(); result != ncclSuccess) {
      return NcclError(call, result, "ncclGroupStart");
    }
    absl::Status status;
    for (int root = 0; root < size_ && status.ok(); ++root) {
      const int64_t block_bytes = outer * row_bytes[root];
      if (block_bytes == 0) continue;
      if (ncclResult_t result =
              ncclBroadcast(call.input.data, block(root), static_cast<size_t>(block_bytes),
                            ncclUint8, root, state.comm, state.stream);
          result != ncclSuccess) {
        status = NcclError(call, result, absl::StrCat("ncclBroadcast from rank ", root));
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (!status.ok()) return status;
    if (absl::Status settled = Settle(call, end, "ncclGroupEnd"); !settled.ok()) return settled;
  }
  if (direct) return absl::OkStatus();
  const int64_t output_row_bytes = total_length * inner_bytes;
  for (int peer = 0; peer < size_; ++peer) {
    if (absl::Status status = CopyRows(
            ByteAt(call.output.data, offsets[peer] * inner_bytes), output_row_bytes, block(peer),
            row_bytes[peer], row_bytes[peer], outer, state.stream,
            absl::StrCat(Where(call), "placing rank ", peer, "'s block along axis ", axis));
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status NcclCollectives::EnqueueReduceScatter(const CollectiveCall& call) {
  const RankState& state = ranks_[call.rank];
  const plan::CollectiveConf& conf = *call.conf;
  const int axis = conf.axis();
  const int64_t element_bytes = DataTypeSize(call.input.data_type);
  absl::StatusOr<ncclDataType_t> data_type = NcclDataType(call.input.data_type);
  if (!data_type.ok()) {
    return absl::UnimplementedError(absl::StrCat(Where(call), data_type.status().message()));
  }
  // Every input has one shape. Rank q's slice is BalancedRange(length, size, q) along `axis`:
  // `outer` rows of slice_q * inner elements. NCCL reduces contiguous blocks, so along an inner
  // axis each slice is first packed into scratch memory, the slices one after another.
  const AxisSplit split = SplitAt(call.input.shape, axis);
  const int64_t inner_bytes = split.inner * element_bytes;
  std::vector<AxisRange> slices(size_);
  for (int peer = 0; peer < size_; ++peer) slices[peer] = BalancedRange(split.length, size_, peer);
  const bool direct = split.outer == 1;
  StreamScratch scratch(state.stream);
  if (!direct) {
    if (absl::Status status = scratch.Allocate(call.input.ByteSize(), Where(call)); !status.ok()) {
      return status;
    }
  }
  std::byte* packed = direct ? static_cast<std::byte*>(call.input.data) : scratch.data();
  auto block = [&](int peer) { return packed + split.outer * slices[peer].begin * inner_bytes; };
  if (!direct) {
    for (int peer = 0; peer < size_; ++peer) {
      const int64_t width = slices[peer].size() * inner_bytes;
      if (absl::Status status = CopyRows(
              block(peer), width, ByteAt(call.input.data, slices[peer].begin * inner_bytes),
              split.length * inner_bytes, width, split.outer, state.stream,
              absl::StrCat(Where(call), "packing rank ", peer, "'s slice along axis ", axis));
          !status.ok()) {
        return status;
      }
    }
  }
  auto elements = [&](int peer) { return split.outer * slices[peer].size() * split.inner; };
  if (split.length % size_ == 0) {
    if (elements(0) == 0) return absl::OkStatus();
    return Settle(
        call,
        ncclReduceScatter(packed, call.output.data, static_cast<size_t>(elements(0)), *data_type,
                          NcclOperation(conf.reduce()), state.comm, state.stream),
        "ncclReduceScatter");
  }
  // Unequal slices: one reduction to each rank.
  if (ncclResult_t result = ncclGroupStart(); result != ncclSuccess) {
    return NcclError(call, result, "ncclGroupStart");
  }
  absl::Status status;
  for (int root = 0; root < size_ && status.ok(); ++root) {
    if (elements(root) == 0) continue;
    if (ncclResult_t result =
            ncclReduce(block(root), call.output.data, static_cast<size_t>(elements(root)),
                       *data_type, NcclOperation(conf.reduce()), root, state.comm, state.stream);
        result != ncclSuccess) {
      status = NcclError(call, result, absl::StrCat("ncclReduce to rank ", root));
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (!status.ok()) return status;
  return Settle(call, end, "ncclGroupEnd");
}

absl::Status NcclCollectives::EnqueueAllToAll(const CollectiveCall& call,
                                              const std::vector<Shape>& input_shapes) {
  const RankState& state = ranks_[call.rank];
  const int rank = call.rank;
  const int axis = call.conf->axis();
  const int concat_axis = call.conf->concat_axis();
  const int64_t element_bytes = DataTypeSize(call.input.data_type);

  // Sending: block q is this rank's balanced slice q along `axis` (`outer` rows of
  // slice_q * inner elements), packed into scratch memory unless it is one row.
  const AxisSplit send_split = SplitAt(call.input.shape, axis);
  const int64_t send_inner_bytes = send_split.inner * element_bytes;
  std::vector<AxisRange> send_slices(size_);
  for (int peer = 0; peer < size_; ++peer) {
    send_slices[peer] = BalancedRange(send_split.length, size_, peer);
  }
  const bool send_direct = send_split.outer == 1;
  StreamScratch send_scratch(state.stream);
  if (!send_direct) {
    if (absl::Status status = send_scratch.Allocate(call.input.ByteSize(), Where(call));
        !status.ok()) {
      return status;
    }
  }
  std::byte* send_base =
      send_direct ? static_cast<std::byte*>(call.input.data) : send_scratch.data();
  auto send_block = [&](int peer) {
    return send_base + send_split.outer * send_slices[peer].begin * send_inner_bytes;
  };
  auto send_bytes = [&](int peer) {
    return send_split.outer * send_slices[peer].size() * send_inner_bytes;
  };

  // Receiving: block s is rank s's slice for this rank, its input shape with `axis` cut to that
  // slice; the blocks are concatenated along `concat_axis` in rank order (they agree elsewhere).
  const AxisSplit output_split = SplitAt(call.output.shape, concat_axis);
  const int64_t receive_inner_bytes = output_split.inner * element_bytes;
  std::vector<int64_t> receive_offsets(size_);
  std::vector<int64_t> receive_row_bytes(size_);
  int64_t total_length = 0;
  for (int peer = 0; peer < size_; ++peer) {
    Shape block_shape = input_shapes[peer];
    if (block_shape.rank() > 0) {
      block_shape.set_dimension(axis,
                                BalancedRange(block_shape.dimension(axis), size_, rank).size());
    }
    const int64_t length = SplitAt(block_shape, concat_axis).length;
    receive_offsets[peer] = total_length;
    receive_row_bytes[peer] = length * receive_inner_bytes;
    total_length += length;
  }
  const bool receive_direct = output_split.outer == 1;
  StreamScratch receive_scratch(state.stream);
  if (!receive_direct) {
    if (absl::Status status = receive_scratch.Allocate(call.output.ByteSize(), Where(call));
        !status.ok()) {
      return status;
    }
  }
  std::byte* receive_base =
      receive_direct ? static_cast<std::byte*>(call.output.data) : receive_scratch.data();
  auto receive_block = [&](int peer) {
    return receive_base + output_split.outer * receive_offsets[peer] * receive_inner_bytes;
  };
  auto receive_bytes = [&](int peer) { return output_split.outer * receive_row_bytes[peer]; };

  if (!send_direct) {
    for (int peer = 0; peer < size_; ++peer) {
      const int64_t width = send_slices[peer].size() * send_inner_bytes;
      if (absl::Status status = CopyRows(
              send_block(peer), width,
              ByteAt(call.input.data, send_slices[peer].begin * send_inner_bytes),
              send_split.length * send_inner_bytes, width, send_split.outer, state.stream,
              absl::StrCat(Where(call), "packing the slice for rank ", peer, " along axis ", axis));
          !status.ok()) {
        return status;
      }
    }
  }
  // This rank's own block is a copy on the device.
  if (absl::Status status = CopyRows(receive_block(rank), send_bytes(rank), send_block(rank),
                                     send_bytes(rank), send_bytes(rank), 1, state.stream,
                                     absl::StrCat(Where(call), "copying the rank's own block"));
      !status.ok()) {
    return status;
  }
  if (size_ > 1) {
    if (ncclResult_t result = ncclGroupStart(); result != ncclSuccess) {
      return NcclError(call, result, "ncclGroupStart");
    }
    absl::Status status;
    for (int peer = 0; peer < size_ && status.ok(); ++peer) {
      if (peer == rank) continue;
      if (send_bytes(peer) > 0) {
        if (ncclResult_t result = ncclSend(send_block(peer), static_cast<size_t>(send_bytes(peer)),
                                           ncclUint8, peer, state.comm, state.stream);
            result != ncclSuccess) {
          status = NcclError(call, result, absl::StrCat("ncclSend to rank ", peer));
          break;
        }
      }
      if (receive_bytes(peer) > 0) {
        if (ncclResult_t result =
                ncclRecv(receive_block(peer), static_cast<size_t>(receive_bytes(peer)), ncclUint8,
                         peer, state.comm, state.stream);
            result != ncclSuccess) {
          status = NcclError(call, result, absl::StrCat("ncclRecv from rank ", peer));
        }
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (!status.ok()) return status;
    if (absl::Status settled = Settle(call, end, "ncclGroupEnd"); !settled.ok()) return settled;
  }
  if (receive_direct) return absl::OkStatus();
  const int64_t output_row_bytes = total_length * receive_inner_bytes;
  for (int peer = 0; peer < size_; ++peer) {
    if (absl::Status status = CopyRows(
            ByteAt(call.output.data, receive_offsets[peer] * receive_inner_bytes), output_row_bytes,
            receive_block(peer), receive_row_bytes[peer], receive_row_bytes[peer],
            output_split.outer, state.stream,
            absl::StrCat(Where(call), "placing rank ", peer, "'s block along axis ", concat_axis));
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}
}  // namespace loom::cuda
