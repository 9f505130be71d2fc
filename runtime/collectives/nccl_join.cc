// Setting up the NCCL backend's communicators: Create (ncclCommInitAll when every rank is on this
// node, NCCL's unique id on rank 0's node otherwise), joining the ranks of several nodes
// (StartJoin, FinishJoin) and the factory MakeNcclCollectivesIfGpus.

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/collective_backend_kind.h"
#include "core/device_name.h"
#include "device/cuda/cuda_status.h"
#include "runtime/collectives/nccl_collectives.h"

namespace loom::cuda {

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
absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNcclCollectivesIfGpus(
    const plan::Communicator& communicator, const plan::Plan& plan, absl::Duration timeout) {
  if (CollectiveBackendKindOf(communicator) != CollectiveBackendKind::kNccl) return nullptr;
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, plan.node(), timeout);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<CollectiveBackend>(std::move(*backend));
}

}  // namespace loom::cuda
