#ifndef LOOM_RUNTIME_COLLECTIVES_NCCL_COLLECTIVES_H_
#define LOOM_RUNTIME_COLLECTIVES_NCCL_COLLECTIVES_H_

// The NCCL collective backend, for communicators whose ranks are all CUDA devices: NcclCollectives
// (one ncclComm_t and one stream per rank of this node; joined across nodes through NCCL's unique
// id) and MakeNcclCollectivesIfGpus, the body of the collective backend factory the CUDA backend
// gives JobOptions. Its layout copies are in nccl_layout_copies.h.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"

namespace loom::cuda {

// The collective backend of a communicator whose ranks are all CUDA devices, one GPU per rank
// (DESIGN.md §4). It runs NCCL: one ncclComm_t per rank of this node, and one non-blocking stream
// per such rank (created on the rank's device) on which the rank's NCCL calls and layout copies
// are enqueued. (How and why: docs/ARCHITECTURE.md, "The CUDA backend", *Collectives: NCCL*
// and *NCCL between nodes*.)
//
// Ranks of one node: the communicators are made together with ncclCommInitAll at Create.
// Ranks on several nodes (each node makes the backend for its own ranks): the node of rank 0
// makes NCCL's unique id at Create (join_id()); the coordinator hands it to every node
// (JobRuntime::JoinCommunicators); StartJoin begins ncclCommInitRankConfig for this node's ranks,
// non-blocking and in one group, and FinishJoin polls until NCCL's bootstrap connected every rank
// of every node, the deadline passes or the backend is aborted (then the node's communicators are
// aborted). Such communicators are non-blocking throughout: an NCCL call that answers
// ncclInProgress is polled until it went through.
//
// Run(call), on the rank's own thread:
//  1. Arrival: every rank of this node deposits its call; the last to arrive checks with
//     CheckCollectiveAgreement (the shared-memory backend's check) that all ranks run the same
//     collective, at the position the communicator's global order expects, with shapes that fit
//     together, and fails them naming both collectives otherwise. Ranks on other nodes are not
//     asked: their shapes are taken to be those of a static plan (balanced slices, as the
//     compiler makes them), so a rank whose shapes do not fit that fails here, and a node that
//     runs another collective is found only by step 3's timeout.
//  2. The rank enqueues its NCCL call(s) on its stream, from its own thread and on its own
//     communicator only. All-gather and all-to-all move bytes, so they take every data type;
//     reductions take the types the agreement check admits (float32); the NCCL mapping covers
//     float32, bfloat16, int32, int64 and uint8.
//  3. The rank polls its stream (cudaStreamQuery, 20 us apart) until the work is done, NCCL
//     reports an asynchronous error, the timeout passes (DEADLINE_EXCEEDED naming the collective,
//     piece and communicator) or the backend is aborted or failed by another rank; in the last
//     three cases it aborts its own communicator (ncclCommAbort) before returning. When its stream
//     is done, NCCL no longer reads this rank's input or writes its output.
//
// Failures are permanent: after an error, a timeout or Abort, every later Run fails at once with
// that status. Reductions run in NCCL's order (not rank order), so their results may differ from
// the CPU backends' in the last bits.
class NcclCollectives final : public CollectiveBackend {
 public:
  // The backend of the communicator's ranks on node `node`. FAILED_PRECONDITION naming the
  // communicator when a rank is not a CUDA device, two ranks of this node share a GPU, or no rank
  // is on this node; NCCL's and CUDA's errors otherwise.
  static absl::StatusOr<std::unique_ptr<NcclCollectives>> Create(
      const plan::Communicator& communicator, int node, absl::Duration timeout);
  ~NcclCollectives() override;

  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  const std::string& communicator() const override { return name_; }
  int size() const override { return size_; }
  absl::string_view transport() const override { return "nccl"; }

  absl::Status Run(const CollectiveCall& call) override;
  void Abort(absl::Status reason) override;

  // Joining across nodes (see above); no-ops when every rank is on this node.
  std::string join_id() const override { return join_id_; }
  absl::Status StartJoin(const std::string& id) override;
  absl::Status FinishJoin(absl::Time deadline) override;

 private:
  struct RankState {
    // Whether the rank is on this node; the others have no device, communicator or stream here.
    bool local = false;
    int device = -1;
    // Null until joined (across nodes), and once aborted (which frees it).
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  NcclCollectives(const plan::Communicator& communicator, absl::Duration timeout,
                  std::vector<RankState> ranks, std::string join_id);

  // The ranks of this node, in rank order, for messages: "ranks 0, 2".
  std::string LocalRanks() const;
  // Records `status` (unless OK) as the backend's failure, aborts every communicator of this
  // node, and returns the recorded failure. For failed joins (no rank thread runs yet).
  absl::Status FailJoin(absl::Status status);

  // Step 1. On success, `input_shapes` holds every rank's input shape for this collective.
  absl::Status Arrive(const CollectiveCall& call, std::vector<Shape>* input_shapes);
  // Step 2: enqueues `call`'s part on its rank's stream.
  absl::Status Enqueue(const CollectiveCall& call, const std::vector<Shape>& input_shapes);
  absl::Status EnqueueAllGather(const CollectiveCall& call, const std::vector<Shape>& input_shapes);
  absl::Status EnqueueReduceScatter(const CollectiveCall& call);
  absl::Status EnqueueAllToAll(const CollectiveCall& call, const std::vector<Shape>& input_shapes);
  // Step 3.
  absl::Status WaitForStream(const CollectiveCall& call);

  // Records `status` as the backend's failure unless one is recorded already, aborts the calling
  // rank's communicator, and returns the recorded failure.
  absl::Status FailAndAbortRank(int rank, absl::Status status);
  void AbortRankCommunicator(int rank);
  // Under mutex_: the first failure wins; wakes every waiter.
  void FailLocked(absl::Status status);
  absl::Status Failure();

  // "communicator 'tp': collective 'x' (sequence 0) on rank 1: ", to begin messages.
  std::string Where(const CollectiveCall& call) const;
  // INTERNAL for an NCCL error, naming the NCCL function and the collective.
  absl::Status NcclError(const CollectiveCall& call, ncclResult_t result,
                         absl::string_view function) const;
  // The result of an NCCL call that enqueues work: ncclInProgress (a communicator joined across
  // nodes is non-blocking) is polled until the call went through, failed, the timeout passed or
  // the backend failed; any other error is NcclError.
  absl::Status Settle(const CollectiveCall& call, ncclResult_t result, absl::string_view function);

  const std::string name_;
  const int size_;
  const int num_collectives_;
  const absl::Duration timeout_;
  // By rank. Each entry is used by its rank's thread (and the destructor) only, and before the
  // job starts by the joining thread.
  std::vector<RankState> ranks_;
  std::vector<int> local_ranks_;
  // Some ranks are on other nodes: the communicators are joined, non-blocking.
  const bool spans_nodes_;
  const int root_node_;        // the node of rank 0
  const std::string join_id_;  // NCCL's unique id, on the node of rank 0 of such a communicator

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<const CollectiveCall*> calls_;  // guarded by mutex_: by rank, while arriving
  int arrived_ = 0;                           // guarded by mutex_
  int64_t arrivals_completed_ = 0;            // guarded by mutex_: the generation
  std::vector<Shape> input_shapes_;           // guarded by mutex_: of the last completed arrival
  absl::Status failure_;                      // guarded by mutex_
  std::atomic<bool> failed_{false};           // failure_ is set; polled without the lock
};

// The body of a JobOptions::collective_backend_factory for GPUs: an NcclCollectives for the ranks
// on this node (plan.node()) of a communicator whose ranks are all CUDA devices, and null (no
// error) when a rank is not a CUDA device (so that another backend serves it).
absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNcclCollectivesIfGpus(
    const plan::Communicator& communicator, const plan::Plan& plan, absl::Duration timeout);

}  // namespace loom::cuda

#endif  // LOOM_RUNTIME_COLLECTIVES_NCCL_COLLECTIVES_H_
