#ifndef LOOM_RUNTIME_CUDA_NCCL_COLLECTIVES_H_
#define LOOM_RUNTIME_CUDA_NCCL_COLLECTIVES_H_

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
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"
#include "runtime/tensor.h"

namespace loom::cuda {

// The collective backend of a communicator whose ranks are all CUDA devices of this process, one
// GPU per rank (DESIGN.md §4). It runs NCCL: one ncclComm_t per rank, made together with
// ncclCommInitAll, and one non-blocking stream per rank (created on the rank's device) on which
// the rank's NCCL calls and layout copies are enqueued.
//
// Single node only: NCCL between nodes needs an ncclUniqueId made on one rank and handed to every
// other through the coordinator before ncclCommInitRank; that exchange does not exist yet, so a
// communicator spanning nodes is not served here.
//
// Run(call), on the rank's own thread:
//  1. Arrival: every rank deposits its call; the last to arrive checks with
//     CheckCollectiveAgreement (the shared-memory backend's check) that all ranks run the same
//     collective, at the position the communicator's global order expects, with shapes that fit
//     together. The check needs no device work; it keeps NCCL's calls of all ranks in one order
//     (NCCL hangs rather than fails when ranks disagree).
//  2. The rank enqueues its NCCL call(s) on its stream, from its own thread and on its own
//     communicator only:
//       - all-reduce: ncclAllReduce (sum or max);
//       - all-gather: ncclAllGather when every rank brings as many elements, else one
//         ncclBroadcast per rank in a group. Along an axis other than the outermost non-trivial
//         one the blocks are gathered into scratch memory, then placed with cudaMemcpy2DAsync;
//       - reduce-scatter: ncclReduceScatter when the balanced slices are equal, else one
//         ncclReduce per rank in a group. Along an inner axis each rank's slice is first packed
//         into scratch memory (cudaMemcpy2DAsync);
//       - all-to-all: ncclSend/ncclRecv per peer in a group (the rank's own block is a device
//         copy), with packing and unpacking through scratch memory when the split or the
//         concatenation axis is an inner one.
//     All-gather and all-to-all move bytes, so they take every data type; reductions take the
//     types the agreement check admits (float32); the NCCL mapping covers float32, bfloat16,
//     int32, int64 and uint8. Scratch memory is stream-ordered (cudaMallocAsync/cudaFreeAsync).
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
  // FAILED_PRECONDITION naming the communicator when a rank is not a CUDA device, two ranks share
  // a GPU, or the ranks are on different nodes; NCCL's and CUDA's errors otherwise.
  static absl::StatusOr<std::unique_ptr<NcclCollectives>> Create(
      const plan::Communicator& communicator, absl::Duration timeout);
  ~NcclCollectives() override;

  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  const std::string& communicator() const override { return name_; }
  int size() const override { return size_; }
  absl::string_view transport() const override { return "nccl"; }

  absl::Status Run(const CollectiveCall& call) override;
  void Abort(absl::Status reason) override;

 private:
  struct RankState {
    int device = 0;
    // Null once the rank's own thread aborted it (which frees it).
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  NcclCollectives(const plan::Communicator& communicator, absl::Duration timeout,
                  std::vector<RankState> ranks);

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

  const std::string name_;
  const int size_;
  const int num_collectives_;
  const absl::Duration timeout_;
  // By rank. Each entry is used by its rank's thread (and the destructor) only.
  std::vector<RankState> ranks_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<const CollectiveCall*> calls_;  // guarded by mutex_: by rank, while arriving
  int arrived_ = 0;                           // guarded by mutex_
  int64_t arrivals_completed_ = 0;            // guarded by mutex_: the generation
  std::vector<Shape> input_shapes_;           // guarded by mutex_: of the last completed arrival
  absl::Status failure_;                      // guarded by mutex_
  std::atomic<bool> failed_{false};           // failure_ is set; polled without the lock
};

// The body of a JobOptions::collective_backend_factory for GPUs: an NcclCollectives for a
// communicator whose ranks are all CUDA devices of this node (plan.node()), null (no error) when
// a rank is not a CUDA device (so that another backend serves it), and UNIMPLEMENTED when CUDA
// ranks are on other nodes (NCCL between nodes needs the unique-id exchange, not built yet).
absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNcclCollectivesIfLocalGpus(
    const plan::Communicator& communicator, const plan::Plan& plan, absl::Duration timeout);

}  // namespace loom::cuda

#endif  // LOOM_RUNTIME_CUDA_NCCL_COLLECTIVES_H_
