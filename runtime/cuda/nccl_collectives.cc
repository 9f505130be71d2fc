#include "runtime/cuda/nccl_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "runtime/balanced_split.h"
#include "runtime/collective_agreement.h"
#include "runtime/collective_backend_kind.h"
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

// For a communicator spanning nodes, whose ranks on other nodes this node does not hear from:
// their signatures and input shapes (filled in where rank is not in `local_ranks`) as a static
// plan gives them, from those of this node's ranks (filled in). All-reduce and reduce-scatter
// inputs share one shape; an all-gather's inputs are balanced slices of the output along `axis`;
// an all-to-all's inputs are balanced slices of the output along `concat_axis` (the same length
// along `axis`). INVALID_ARGUMENT, naming the collective, when the output shape the assumed
// inputs give a remote rank cannot be made.
absl::Status AssumeRemoteSignatures(absl::string_view communicator,
                                    const std::vector<int>& local_ranks,
                                    std::vector<CollectiveSignature>* signatures,
                                    std::vector<Shape>* inputs) {
  const int size = static_cast<int>(signatures->size());
  std::vector<bool> local(size, false);
  for (int rank : local_ranks) local[rank] = true;
  const CollectiveSignature model = (*signatures)[local_ranks.front()];
  const plan::CollectiveConf& conf = *model.conf;
  // The balanced slice `peer` of the output's length along `axis`, when both shapes have it.
  auto slice_of_output = [&](Shape* input, int axis, int peer) {
    if (axis < 0 || axis >= input->rank() || axis >= model.output_shape.rank()) return;
    input->set_dimension(axis,
                         BalancedRange(model.output_shape.dimension(axis), size, peer).size());
  };
  for (int peer = 0; peer < size; ++peer) {
    if (local[peer]) continue;
    Shape input = model.input_shape;
    if (conf.kind() == plan::ALL_GATHER) slice_of_output(&input, conf.axis(), peer);
    if (conf.kind() == plan::ALL_TO_ALL && conf.concat_axis() != conf.axis()) {
      slice_of_output(&input, conf.concat_axis(), peer);
    }
    (*inputs)[peer] = std::move(input);
  }
  for (int peer = 0; peer < size; ++peer) {
    if (local[peer]) continue;
    absl::StatusOr<Shape> output = CollectiveOutputShape(conf, *inputs, peer);
    if (!output.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "communicator '", communicator, "': collective ", DescribeCollective(conf),
          ": the shapes of this node's ranks do not fit a static plan (balanced slices) for the "
          "ranks on other nodes: ",
          output.status().message()));
    }
    (*signatures)[peer] = CollectiveSignature{model.conf, model.input_type, (*inputs)[peer],
                                              model.output_type, *std::move(output)};
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCollectives>> NcclCollectives::Create(
    const plan::Communicator& communicator, int node, absl::Duration timeout) {
  const std::string prefix = absl::StrCat("communicator '", communicator.name(), "': ");
  const int size = communicator.devices_size();
  if (size == 0) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "has no ranks"));
  }
  std::vector<RankState> ranks(size);
  std::vector<int> local_ranks;
  for (int rank = 0; rank < size; ++rank) {
    const plan::Device& device = communicator.devices(rank);
    if (device.type() != plan::CUDA) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "rank ", rank, " is on ", DeviceName(device),
                       ", not a CUDA device: the NCCL backend serves communicators of GPUs only"));
    }
    if (device.node() != node) continue;
    for (int other : local_ranks) {
      if (communicator.devices(other).index() == device.index()) {
        return absl::FailedPreconditionError(absl::StrCat(prefix, "ranks ", other, " and ", rank,
                                                          " are both on ", DeviceName(device),
                                                          ": NCCL needs one GPU per rank"));
      }
    }
    ranks[rank].local = true;
    ranks[rank].device = device.index();
    local_ranks.push_back(rank);
  }
  if (local_ranks.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "has no rank on node ", node));
  }
  int device_count = 0;
  if (absl::Status status =
          CudaStatus(cudaGetDeviceCount(&device_count), absl::StrCat(prefix, "counting GPUs"));
      !status.ok()) {
    return status;
  }
  for (int rank : local_ranks) {
    if (ranks[rank].device < 0 || ranks[rank].device >= device_count) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "rank ", rank, " is on ", DeviceName(communicator.devices(rank)),
                       ", but this process sees ", device_count, " GPU(s)"));
    }
  }

  std::string join_id;
  if (static_cast<int>(local_ranks.size()) == size) {
    std::vector<int> device_list(size);
    for (int rank = 0; rank < size; ++rank) device_list[rank] = ranks[rank].device;
    std::vector<ncclComm_t> comms(size, nullptr);
    if (ncclResult_t result = ncclCommInitAll(comms.data(), size, device_list.data());
        result != ncclSuccess) {
      return absl::InternalError(absl::StrCat(prefix, "ncclCommInitAll over ", size,
                                              " GPU(s) failed: ", ncclGetErrorString(result), " (",
                                              ncclGetLastError(nullptr), ")"));
    }
    for (int rank = 0; rank < size; ++rank) ranks[rank].comm = comms[rank];
  } else if (ranks[0].local) {
    // Rank 0's node makes the id every node joins with (it also runs NCCL's bootstrap root).
    ncclUniqueId id;
    if (ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) {
      return absl::InternalError(
          absl::StrCat(prefix, "ncclGetUniqueId failed: ", ncclGetErrorString(result), " (",
                       ncclGetLastError(nullptr), ")"));
    }
    join_id.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }

  int previous_device = 0;
  const bool restore_device = cudaGetDevice(&previous_device) == cudaSuccess;
  absl::Status status;
  for (int rank : local_ranks) {
    const std::string where =
        absl::StrCat(prefix, "creating the stream of rank ", rank, " on cuda:", ranks[rank].device);
    status = CudaStatus(cudaSetDevice(ranks[rank].device), where);
    if (status.ok()) {
      status =
          CudaStatus(cudaStreamCreateWithFlags(&ranks[rank].stream, cudaStreamNonBlocking), where);
    }
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    for (int rank : local_ranks) {
      cudaSetDevice(ranks[rank].device);
      if (ranks[rank].stream != nullptr) cudaStreamDestroy(ranks[rank].stream);
      if (ranks[rank].comm != nullptr) ncclCommDestroy(ranks[rank].comm);
    }
  }
  if (restore_device) cudaSetDevice(previous_device);
  if (!status.ok()) return status;
  return std::unique_ptr<NcclCollectives>(
      new NcclCollectives(communicator, timeout, std::move(ranks), std::move(join_id)));
}

NcclCollectives::NcclCollectives(const plan::Communicator& communicator, absl::Duration timeout,
                                 std::vector<RankState> ranks, std::string join_id)
    : name_(communicator.name()),
      size_(communicator.devices_size()),
      num_collectives_(communicator.num_collectives()),
      timeout_(timeout),
      ranks_(std::move(ranks)),
      spans_nodes_(std::any_of(ranks_.begin(), ranks_.end(),
                               [](const RankState& rank) { return !rank.local; })),
      root_node_(communicator.devices(0).node()),
      join_id_(std::move(join_id)),
      calls_(size_, nullptr) {
  for (int rank = 0; rank < size_; ++rank) {
    if (ranks_[rank].local) local_ranks_.push_back(rank);
  }
}

NcclCollectives::~NcclCollectives() {
  const bool failed = failed_.load(std::memory_order_acquire);
  int previous_device = 0;
  const bool restore_device = cudaGetDevice(&previous_device) == cudaSuccess;
  // Which communicators may be destroyed; the others are aborted. After a failure all are
  // aborted, since a peer's communicator may be gone and work may be stuck. A healthy
  // communicator joined across nodes (non-blocking) is finalized first, which flushes its work
  // with the peers' (bounded): NCCL wants a communicator destroyed only once its state is
  // ncclSuccess, and one with an error aborted; one thread finalizing several ranks must group
  // the calls. Healthy communicators of one ncclCommInitAll are destroyed one after another (NCCL
  // defers the shared teardown to the last).
  std::vector<bool> destroy(ranks_.size(), !failed);
  if (!failed) {
    for (RankState& rank : ranks_) {
      if (!rank.local || rank.comm == nullptr) continue;
      cudaSetDevice(rank.device);
      cudaStreamSynchronize(rank.stream);
    }
  }
  if (!failed && spans_nodes_) {
    ncclGroupStart();
    for (size_t index = 0; index < ranks_.size(); ++index) {
      RankState& rank = ranks_[index];
      if (!rank.local || rank.comm == nullptr) continue;
      cudaSetDevice(rank.device);
      const ncclResult_t result = ncclCommFinalize(rank.comm);
      if (result != ncclSuccess && result != ncclInProgress) destroy[index] = false;
    }
    const ncclResult_t grouped = ncclGroupEnd();
    const bool group_failed = grouped != ncclSuccess && grouped != ncclInProgress;
    const auto until = Clock::now() + kDrainAfterAbort;
    for (size_t index = 0; index < ranks_.size(); ++index) {
      RankState& rank = ranks_[index];
      if (!rank.local || rank.comm == nullptr) continue;
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(rank.comm, &state) == ncclSuccess && state == ncclInProgress &&
             Clock::now() < until) {
        std::this_thread::sleep_for(kPollInterval);
      }
      if (group_failed || state != ncclSuccess) {
        destroy[index] = false;
        LOG(WARNING) << "communicator '" << name_ << "': finalizing on cuda:" << rank.device
                     << " ended in " << ncclGetErrorString(group_failed ? grouped : state)
                     << "; aborting it instead of destroying it";
      }
    }
  }
  for (size_t index = 0; index < ranks_.size(); ++index) {
    RankState& rank = ranks_[index];
    if (!rank.local || rank.comm == nullptr) continue;
    cudaSetDevice(rank.device);
    if (!destroy[index]) {
      ncclCommAbort(rank.comm);
    } else if (ncclResult_t result = ncclCommDestroy(rank.comm); result != ncclSuccess) {
      LOG(WARNING) << "communicator '" << name_ << "': ncclCommDestroy on cuda:" << rank.device
                   << ": " << ncclGetErrorString(result);
    }
    rank.comm = nullptr;
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

absl::Status NcclCollectives::Settle(const CollectiveCall& call, ncclResult_t result,
                                     absl::string_view function) {
  if (result == ncclSuccess) return absl::OkStatus();
  if (result != ncclInProgress) return NcclError(call, result, function);
  const ncclComm_t comm = ranks_[call.rank].comm;
  const auto deadline = Clock::now() + absl::ToChronoNanoseconds(timeout_);
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t query = ncclCommGetAsyncError(comm, &state); query != ncclSuccess) {
      return NcclError(call, query, "ncclCommGetAsyncError");
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(call, state, function);
    if (failed_.load(std::memory_order_acquire)) return Failure();
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          Where(call), function, " did not go through within ", absl::FormatDuration(timeout_)));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string NcclCollectives::LocalRanks() const {
  return absl::StrCat(local_ranks_.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(local_ranks_, ", "));
}

absl::Status NcclCollectives::StartJoin(const std::string& id) {
  if (!spans_nodes_) return absl::OkStatus();
  const std::string where =
      absl::StrCat("communicator '", name_, "': joining ", LocalRanks(), " of ", size_, ": ");
  if (failed_.load(std::memory_order_acquire)) return Failure();
  if (id.size() != sizeof(ncclUniqueId)) {
    return FailJoin(absl::FailedPreconditionError(absl::StrCat(
        where, "NCCL's unique id, made by the node of rank 0 (node ", root_node_, "), ",
        id.empty() ? std::string("did not come")
                   : absl::StrCat("has ", id.size(), " bytes, not ", sizeof(ncclUniqueId)))));
  }
  ncclUniqueId unique_id;
  std::memcpy(&unique_id, id.data(), sizeof(unique_id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // FinishJoin polls, so that a deadline or an abort can end the wait
  int previous_device = 0;
  const bool restore_device = cudaGetDevice(&previous_device) == cudaSuccess;
  absl::Status status;
  if (ncclResult_t result = ncclGroupStart(); result != ncclSuccess) {
    status = absl::InternalError(
        absl::StrCat(where, "ncclGroupStart failed: ", ncclGetErrorString(result)));
  }
  const bool grouped = status.ok();
  for (int rank : local_ranks_) {
    if (!status.ok()) break;
    status = CudaStatus(cudaSetDevice(ranks_[rank].device),
                        absl::StrCat(where, "selecting cuda:", ranks_[rank].device));
    if (!status.ok()) break;
    if (ncclResult_t result =
            ncclCommInitRankConfig(&ranks_[rank].comm, size_, unique_id, rank, &config);
        result != ncclSuccess && result != ncclInProgress) {
      status = absl::InternalError(absl::StrCat(where, "ncclCommInitRankConfig of rank ", rank,
                                                " failed: ", ncclGetErrorString(result), " (",
                                                ncclGetLastError(nullptr), ")"));
    }
  }
  if (grouped) {
    if (ncclResult_t result = ncclGroupEnd();
        status.ok() && result != ncclSuccess && result != ncclInProgress) {
      status = absl::InternalError(absl::StrCat(where,
                                                "ncclGroupEnd failed: ", ncclGetErrorString(result),
                                                " (", ncclGetLastError(nullptr), ")"));
    }
  }
  if (restore_device) cudaSetDevice(previous_device);
  if (!status.ok()) return FailJoin(std::move(status));
  return absl::OkStatus();
}

absl::Status NcclCollectives::FinishJoin(absl::Time deadline) {
  if (!spans_nodes_) return absl::OkStatus();
  const absl::Time started = absl::Now();
  while (true) {
    bool joining = false;
    for (int rank : local_ranks_) {
      const ncclComm_t comm = ranks_[rank].comm;
      if (comm == nullptr) {  // StartJoin failed (the failure is recorded), or never ran
        return FailJoin(absl::FailedPreconditionError(absl::StrCat(
            "communicator '", name_, "': rank ", rank, " waits to join without having started")));
      }
      ncclResult_t state = ncclSuccess;
      const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
      if (query == ncclSuccess && state == ncclInProgress) {
        joining = true;
        continue;
      }
      if (query != ncclSuccess || state != ncclSuccess) {
        const ncclResult_t error = query != ncclSuccess ? query : state;
        return FailJoin(absl::InternalError(absl::StrCat(
            "communicator '", name_, "': rank ", rank, " (cuda:", ranks_[rank].device,
            ") could not join the ranks of the other nodes: ", ncclGetErrorString(error), " (",
            ncclGetLastError(comm), ")")));
      }
    }
    if (!joining) return absl::OkStatus();
    if (failed_.load(std::memory_order_acquire)) return FailJoin(absl::OkStatus());
    if (absl::Now() >= deadline) {
      return FailJoin(absl::DeadlineExceededError(absl::StrCat(
          "communicator '", name_, "': ", LocalRanks(), " waited ",
          absl::FormatDuration(absl::Now() - started),
          " for the ranks of the other nodes to join (through NCCL's bootstrap at the node of "
          "rank 0, node ",
          root_node_,
          "): does a node not run the job, or can it not reach this one? (NCCL_DEBUG=INFO shows "
          "NCCL's side)")));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status NcclCollectives::FailJoin(absl::Status status) {
  absl::Status failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!status.ok()) FailLocked(std::move(status));
    failure = failure_;
  }
  for (int rank : local_ranks_) AbortRankCommunicator(rank);
  return failure;
}

absl::Status NcclCollectives::Run(const CollectiveCall& call) {
  const int rank = call.rank;
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator '", name_, "' has ", size_, " ranks, so it has no rank ", rank));
  }
  if (!ranks_[rank].local) {
    return absl::InvalidArgumentError(absl::StrCat("communicator '", name_, "': rank ", rank,
                                                   " is not on this node (its ", LocalRanks(),
                                                   " are)"));
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
  if (++arrived_ == static_cast<int>(local_ranks_.size())) {
    // The last to arrive checks the collective for everyone, then lets them go.
    arrived_ = 0;
    std::vector<CollectiveSignature> signatures(size_);
    std::vector<Shape> shapes(size_);
    for (int peer : local_ranks_) {
      const CollectiveCall& peer_call = *calls_[peer];
      signatures[peer] =
          CollectiveSignature{peer_call.conf, peer_call.input.data_type, peer_call.input.shape,
                              peer_call.output.data_type, peer_call.output.shape};
      shapes[peer] = peer_call.input.shape;
    }
    if (spans_nodes_) {
      if (absl::Status status = AssumeRemoteSignatures(name_, local_ranks_, &signatures, &shapes);
          !status.ok()) {
        FailLocked(std::move(status));
        return failure_;
      }
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
      for (int peer : local_ranks_) {
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

absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNcclCollectivesIfGpus(
    const plan::Communicator& communicator, const plan::Plan& plan, absl::Duration timeout) {
  if (CollectiveBackendKindOf(communicator) != CollectiveBackendKind::kNccl) return nullptr;
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, plan.node(), timeout);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<CollectiveBackend>(std::move(*backend));
}

}  // namespace loom::cuda
