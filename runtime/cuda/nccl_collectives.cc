#include "runtime/cuda/nccl_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "runtime/balanced_split.h"
#include "runtime/collective_agreement.h"
#include "runtime/collective_shapes.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/data_type.h"
#include "runtime/device_name.h"

namespace loom::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank sleeps between two polls of its stream.
constexpr auto kPollInterval = std::chrono::microseconds(20);
// How long a rank that aborted its communicator waits for its stream to drain (the aborted NCCL
// kernels exit, the copies queued behind them run) before it returns anyway.
constexpr auto kDrainAfterAbort = std::chrono::seconds(5);

// A shape seen around one axis: the elements before it (outer), along it and after it (inner).
// A scalar is one element on every side.
struct AxisSplit {
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
};

AxisSplit SplitAt(const Shape& shape, int axis) {
  AxisSplit split;
  if (shape.rank() == 0) return split;
  for (int dimension = 0; dimension < axis; ++dimension) split.outer *= shape.dimension(dimension);
  split.length = shape.dimension(axis);
  for (int dimension = axis + 1; dimension < shape.rank(); ++dimension) {
    split.inner *= shape.dimension(dimension);
  }
  return split;
}

std::byte* ByteAt(void* base, int64_t offset) { return static_cast<std::byte*>(base) + offset; }

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

// Device memory for one collective's staging, taken and given back in the stream's order.
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
  ~StreamScratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  absl::Status Allocate(int64_t bytes, absl::string_view what) {
    if (bytes <= 0) return absl::OkStatus();
    return CudaStatus(cudaMallocAsync(&data_, static_cast<size_t>(bytes), stream_),
                      absl::StrCat(what, ": allocating ", bytes, " bytes of scratch memory"));
  }
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

// Copies `height` rows of `width` bytes between buffers whose rows are `source_pitch` and
// `destination_pitch` bytes apart, on `stream`.
absl::Status CopyRows(void* destination, int64_t destination_pitch, const void* source,
                      int64_t source_pitch, int64_t width, int64_t height, cudaStream_t stream,
                      absl::string_view what) {
  if (width <= 0 || height <= 0) return absl::OkStatus();
  if (height == 1 || (width == source_pitch && width == destination_pitch)) {
    return CudaStatus(cudaMemcpyAsync(destination, source, static_cast<size_t>(width * height),
                                      cudaMemcpyDefault, stream),
                      absl::StrCat(what, ": cudaMemcpyAsync"));
  }
  return CudaStatus(cudaMemcpy2DAsync(destination, static_cast<size_t>(destination_pitch), source,
                                      static_cast<size_t>(source_pitch), static_cast<size_t>(width),
                                      static_cast<size_t>(height), cudaMemcpyDefault, stream),
                    absl::StrCat(what, ": cudaMemcpy2DAsync"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCollectives>> NcclCollectives::Create(
    const plan::Communicator& communicator, absl::Duration timeout) {
  const std::string prefix = absl::StrCat("communicator '", communicator.name(), "': ");
  const int size = communicator.devices_size();
  if (size == 0) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "has no ranks"));
  }
  std::vector<int> device_list(size);
  for (int rank = 0; rank < size; ++rank) {
    const plan::Device& device = communicator.devices(rank);
    if (device.type() != plan::CUDA) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "rank ", rank, " is on ", DeviceName(device),
                       ", not a CUDA device: the NCCL backend serves communicators of GPUs only"));
    }
    if (device.node() != communicator.devices(0).node()) {
      return absl::FailedPreconditionError(absl::StrCat(
          prefix, "rank ", rank, " is on node ", device.node(), " but rank 0 on node ",
          communicator.devices(0).node(),
          ": the NCCL backend serves the GPUs of one process only (NCCL between nodes needs a "
          "unique id exchanged through the coordinator, which is not built yet)"));
    }
    for (int other = 0; other < rank; ++other) {
      if (communicator.devices(other).index() == device.index()) {
        return absl::FailedPreconditionError(absl::StrCat(prefix, "ranks ", other, " and ", rank,
                                                          " are both on ", DeviceName(device),
                                                          ": NCCL needs one GPU per rank"));
      }
    }
    device_list[rank] = device.index();
  }
  int device_count = 0;
  if (absl::Status status =
          CudaStatus(cudaGetDeviceCount(&device_count), absl::StrCat(prefix, "counting GPUs"));
      !status.ok()) {
    return status;
  }
  for (int rank = 0; rank < size; ++rank) {
    if (device_list[rank] < 0 || device_list[rank] >= device_count) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "rank ", rank, " is on ", DeviceName(communicator.devices(rank)),
                       ", but this process sees ", device_count, " GPU(s)"));
    }
  }

  int previous_device = 0;
  const bool restore_device = cudaGetDevice(&previous_device) == cudaSuccess;
  std::vector<RankState> ranks(size);
  std::vector<ncclComm_t> comms(size, nullptr);
  if (ncclResult_t result = ncclCommInitAll(comms.data(), size, device_list.data());
      result != ncclSuccess) {
    return absl::InternalError(absl::StrCat(prefix, "ncclCommInitAll over ", size,
                                            " GPU(s) failed: ", ncclGetErrorString(result), " (",
                                            ncclGetLastError(nullptr), ")"));
  }
  absl::Status status;
  for (int rank = 0; rank < size; ++rank) {
    ranks[rank].device = device_list[rank];
    ranks[rank].comm = comms[rank];
    if (!status.ok()) continue;
    const std::string where =
        absl::StrCat(prefix, "creating the stream of rank ", rank, " on cuda:", device_list[rank]);
    status = CudaStatus(cudaSetDevice(device_list[rank]), where);
    if (status.ok()) {
      status =
          CudaStatus(cudaStreamCreateWithFlags(&ranks[rank].stream, cudaStreamNonBlocking), where);
    }
  }
  if (restore_device) cudaSetDevice(previous_device);
  if (!status.ok()) {
    for (RankState& rank : ranks) {
      cudaSetDevice(rank.device);
      if (rank.stream != nullptr) cudaStreamDestroy(rank.stream);
      ncclCommDestroy(rank.comm);
    }
    if (restore_device) cudaSetDevice(previous_device);
    return status;
  }
  return std::unique_ptr<NcclCollectives>(
      new NcclCollectives(communicator, timeout, std::move(ranks)));
}

NcclCollectives::NcclCollectives(const plan::Communicator& communicator, absl::Duration timeout,
                                 std::vector<RankState> ranks)
    : name_(communicator.name()),
      size_(communicator.devices_size()),
      num_collectives_(communicator.num_collectives()),
      timeout_(timeout),
      ranks_(std::move(ranks)),
      calls_(size_, nullptr) {}

NcclCollectives::~NcclCollectives() {
  const bool failed = failed_.load(std::memory_order_acquire);
  int previous_device = 0;
  const bool restore_device = cudaGetDevice(&previous_device) == cudaSuccess;
  // Healthy communicators of one ncclCommInitAll are destroyed one after another (NCCL defers
  // the shared teardown to the last); after a failure the rest are aborted, since a peer's
  // communicator may be gone and work may be stuck.
  for (RankState& rank : ranks_) {
    cudaSetDevice(rank.device);
    if (rank.comm != nullptr) {
      if (failed) {
        ncclCommAbort(rank.comm);
      } else {
        cudaStreamSynchronize(rank.stream);
        if (ncclResult_t result = ncclCommDestroy(rank.comm); result != ncclSuccess) {
          LOG(WARNING) << "communicator '" << name_ << "': ncclCommDestroy on cuda:" << rank.device
                       << ": " << ncclGetErrorString(result);
        }
      }
      rank.comm = nullptr;
    }
  }
  for (RankState& rank : ranks_) {
    if (rank.stream == nullptr) continue;
    cudaSetDevice(rank.device);
    // After an abort, work may still be queued; stream destruction does not wait for it, and the
    // stream's resources are released once it is done.
    cudaStreamDestroy(rank.stream);
  }
  if (restore_device) cudaSetDevice(previous_device);
}

void NcclCollectives::FailLocked(absl::Status status) {
  if (failure_.ok()) {
    failure_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
}

absl::Status NcclCollectives::Failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void NcclCollectives::Abort(absl::Status reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return;
  FailLocked(absl::AbortedError(
      absl::StrCat("communicator '", name_, "' was aborted: ", reason.message())));
}

absl::Status NcclCollectives::FailAndAbortRank(int rank, absl::Status status) {
  absl::Status failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!status.ok()) FailLocked(std::move(status));
    failure = failure_;
  }
  AbortRankCommunicator(rank);
  return failure;
}

void NcclCollectives::AbortRankCommunicator(int rank) {
  RankState& state = ranks_[rank];
  if (state.comm == nullptr) return;
  cudaSetDevice(state.device);
  if (ncclResult_t result = ncclCommAbort(state.comm); result != ncclSuccess) {
    LOG(WARNING) << "communicator '" << name_ << "': ncclCommAbort of rank " << rank
                 << " on cuda:" << state.device << ": " << ncclGetErrorString(result);
  }
  state.comm = nullptr;
  // The aborted kernels exit; let what is queued behind them (copies, scratch frees) run before
  // the caller's buffers may be reused, but never wait without bound.
  const auto until = Clock::now() + kDrainAfterAbort;
  while (cudaStreamQuery(state.stream) == cudaErrorNotReady && Clock::now() < until) {
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string NcclCollectives::Where(const CollectiveCall& call) const {
  return absl::StrCat("communicator '", name_, "': collective ", DescribeCollective(*call.conf),
                      " on rank ", call.rank, " (cuda:", ranks_[call.rank].device, "): ");
}

absl::Status NcclCollectives::NcclError(const CollectiveCall& call, ncclResult_t result,
                                        absl::string_view function) const {
  std::string message =
      absl::StrCat(Where(call), function, " failed: ", ncclGetErrorString(result));
  const ncclComm_t comm = ranks_[call.rank].comm;
  if (const char* last = ncclGetLastError(comm); last != nullptr && last[0] != '\0') {
    absl::StrAppend(&message, " (", last, ")");
  }
  return absl::InternalError(message);
}

absl::Status NcclCollectives::Run(const CollectiveCall& call) {
  const int rank = call.rank;
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator '", name_, "' has ", size_, " ranks, so it has no rank ", rank));
  }
  if (failed_.load(std::memory_order_acquire)) return Failure();

  std::vector<Shape> input_shapes;
  if (absl::Status status = Arrive(call, &input_shapes); !status.ok()) return status;
  if (absl::Status status = Enqueue(call, input_shapes); !status.ok()) {
    return FailAndAbortRank(rank, std::move(status));
  }
  return WaitForStream(call);
}

absl::Status NcclCollectives::Arrive(const CollectiveCall& call, std::vector<Shape>* input_shapes) {
  const int rank = call.rank;
  const plan::CollectiveConf& conf = *call.conf;
  const auto deadline = Clock::now() + absl::ToChronoNanoseconds(timeout_);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!failure_.ok()) return failure_;
  const int64_t generation = arrivals_completed_;
  if (calls_[rank] != nullptr) {
    FailLocked(absl::InternalError(
        absl::StrCat("communicator '", name_, "': rank ", rank, " enters collective ",
                     DescribeCollective(conf), " while it is still inside ",
                     DescribeCollective(*calls_[rank]->conf), " (two threads run one rank)")));
    return failure_;
  }
  calls_[rank] = &call;
  if (++arrived_ == size_) {
    // The last to arrive checks the collective for everyone, then lets them go.
    arrived_ = 0;
    std::vector<CollectiveSignature> signatures(size_);
    std::vector<Shape> shapes(size_);
    for (int peer = 0; peer < size_; ++peer) {
      const CollectiveCall& peer_call = *calls_[peer];
      signatures[peer] =
          CollectiveSignature{peer_call.conf, peer_call.input.data_type, peer_call.input.shape,
                              peer_call.output.data_type, peer_call.output.shape};
      shapes[peer] = peer_call.input.shape;
    }
    if (absl::Status check =
            CheckCollectiveAgreement(name_, num_collectives_, generation, signatures);
        !check.ok()) {
      FailLocked(std::move(check));
      return failure_;
    }
    // Peers do not read each other's calls after this point: each takes the shapes it needs.
    input_shapes_ = std::move(shapes);
    std::fill(calls_.begin(), calls_.end(), nullptr);
    arrivals_completed_ = generation + 1;
    *input_shapes = input_shapes_;
    changed_.notify_all();
    return absl::OkStatus();
  }
  // arrivals_completed_ cannot pass generation + 1 before this rank arrives again, so
  // input_shapes_ still describes this collective when this rank wakes.
  while (arrivals_completed_ <= generation && failure_.ok()) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout &&
        arrivals_completed_ <= generation && failure_.ok()) {
      std::vector<int> missing;
      for (int peer = 0; peer < size_; ++peer) {
        if (calls_[peer] == nullptr) missing.push_back(peer);
      }
      FailLocked(absl::DeadlineExceededError(absl::StrCat(
          "communicator '", name_, "': collective ", DescribeCollective(conf), " on rank ", rank,
          " waited ", absl::FormatDuration(timeout_), " at piece ", call.piece, " for ",
          missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
          " to arrive (does a peer never get its input, or do the ranks run different numbers "
          "of pieces?)")));
    }
  }
  if (!failure_.ok()) return failure_;
  *input_shapes = input_shapes_;
  return absl::OkStatus();
}

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
      if (ncclResult_t result =
              ncclAllReduce(call.input.data, call.output.data, static_cast<size_t>(count),
                            *data_type, NcclOperation(conf.reduce()), state.comm, state.stream);
          result != ncclSuccess) {
        return NcclError(call, result, "ncclAllReduce");
      }
      return absl::OkStatus();
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
      if (ncclResult_t result =
              ncclAllGather(call.input.data, gathered, static_cast<size_t>(block_bytes), ncclUint8,
                            state.comm, state.stream);
          result != ncclSuccess) {
        return NcclError(call, result, "ncclAllGather");
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
    if (end != ncclSuccess) return NcclError(call, end, "ncclGroupEnd");
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
    if (ncclResult_t result =
            ncclReduceScatter(packed, call.output.data, static_cast<size_t>(elements(0)),
                              *data_type, NcclOperation(conf.reduce()), state.comm, state.stream);
        result != ncclSuccess) {
      return NcclError(call, result, "ncclReduceScatter");
    }
    return absl::OkStatus();
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
  if (end != ncclSuccess) return NcclError(call, end, "ncclGroupEnd");
  return absl::OkStatus();
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
    if (end != ncclSuccess) return NcclError(call, end, "ncclGroupEnd");
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

absl::Status NcclCollectives::WaitForStream(const CollectiveCall& call) {
  const int rank = call.rank;
  const RankState& state = ranks_[rank];
  const auto deadline = Clock::now() + absl::ToChronoNanoseconds(timeout_);
  while (true) {
    const cudaError_t error = cudaStreamQuery(state.stream);
    if (error == cudaSuccess) return absl::OkStatus();
    if (error != cudaErrorNotReady) {
      return FailAndAbortRank(
          rank, CudaStatus(error, absl::StrCat(Where(call), "running the NCCL work of piece ",
                                               call.piece)));
    }
    ncclResult_t async_error = ncclSuccess;
    if (ncclResult_t result = ncclCommGetAsyncError(state.comm, &async_error);
        result != ncclSuccess) {
      return FailAndAbortRank(rank, NcclError(call, result, "ncclCommGetAsyncError"));
    }
    if (async_error != ncclSuccess && async_error != ncclInProgress) {
      return FailAndAbortRank(
          rank, NcclError(call, async_error, absl::StrCat("the NCCL work of piece ", call.piece)));
    }
    if (failed_.load(std::memory_order_acquire)) {
      // Aborted, or another rank failed: this rank's NCCL work may never finish.
      return FailAndAbortRank(rank, absl::OkStatus());
    }
    if (Clock::now() >= deadline) {
      return FailAndAbortRank(rank, absl::DeadlineExceededError(absl::StrCat(
                                        Where(call), "the NCCL work of piece ", call.piece,
                                        " did not finish within ", absl::FormatDuration(timeout_),
                                        " (is a peer's GPU stuck, or does a peer never run it?)")));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNcclCollectivesIfLocalGpus(
    const plan::Communicator& communicator, const plan::Plan& plan, absl::Duration timeout) {
  if (communicator.devices().empty()) return nullptr;
  for (const plan::Device& device : communicator.devices()) {
    if (device.type() != plan::CUDA) return nullptr;
  }
  for (const plan::Device& device : communicator.devices()) {
    if (device.node() != plan.node()) {
      return absl::UnimplementedError(absl::StrCat(
          "communicator '", communicator.name(), "' spans node ", device.node(), " (device ",
          DeviceName(device), "), but this is node ", plan.node(),
          ": NCCL between nodes needs a unique id exchanged through the coordinator, which is not "
          "built yet"));
    }
  }
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, timeout);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<CollectiveBackend>(std::move(*backend));
}

}  // namespace loom::cuda
