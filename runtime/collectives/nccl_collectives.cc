// The running half of the NCCL backend: arrival and the agreement check (step 1), waiting for the
// rank's stream (step 3), failures and aborts, and tearing the communicators down. Setting them
// up and joining them across nodes is in nccl_join.cc; enqueuing each kind's NCCL calls (step 2)
// in nccl_enqueue.cc.

#include "runtime/collectives/nccl_collectives.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/balanced_split.h"
#include "core/collective_shapes.h"
#include "device/cuda/cuda_status.h"
#include "glog/logging.h"
#include "runtime/collectives/collective_agreement.h"

namespace loom::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank sleeps between two polls of its stream.
constexpr auto kPollInterval = std::chrono::microseconds(20);
// How long a rank that aborted its communicator waits for its stream to drain (the aborted NCCL
// kernels exit, the copies queued behind them run) before it returns anyway.
constexpr auto kDrainAfterAbort = std::chrono::seconds(5);
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
}  // namespace loom::cuda
