#ifndef LOOM_DAEMON_STEP_TRACKER_H_
#define LOOM_DAEMON_STEP_TRACKER_H_

// StepTracker: the coordinator's StepEvent per finished training step of the running job, made
// from the pieces of the loss, the other scalar fetches and the evaluated loss that its nodes
// forward (StepCollector), and the assembly of further counted fetches (the MoE metrics). The
// JobManager creates one for each training job it runs.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "node/fetch_pieces.h"
#include "node/step_collector.h"
#include "proto/loom/v1/job_service.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom::daemon {

// One StepEvent per finished training step (StepCollector: a step is finished when every
// rank's sink holds every micro-batch piece of its loss and of the plan's other scalar fetches,
// and in a step that evaluates, of the evaluated loss: StepEvent.validation_loss), as `loomctl
// run` prints its lines.
//
// Thread-safe: OnPiece runs on the threads that receive the nodes' forwarded pieces; `on_step` is
// called under the tracker's lock, in step order, and must be quick.
class StepTracker {
 public:
  using StepCallback = std::function<void(const v1::StepEvent&)>;

  // `fetches`: the plan's StepFetchesOf the job's loss (a float32 scalar, else INVALID_ARGUMENT),
  // with its evaluation fetch when the job evaluates.
  // `micro_batches_per_step`: Plan.num_micro_batches (0 means 1).
  static absl::StatusOr<std::unique_ptr<StepTracker>> Create(const StepFetches& fetches,
                                                             int micro_batches_per_step,
                                                             int64_t num_steps,
                                                             std::optional<int64_t> tokens_per_step,
                                                             StepCallback on_step);

  // Also assembles `fetch` (all its ranks, per micro-batch piece; once, when it is a step fetch
  // too) and hands every assembled piece to `on_piece` (under the tracker's lock; it must be
  // quick). Before the job starts.
  void AddCountedFetch(const plan::Fetch& fetch, std::function<void(const HostTensor&)> on_piece);
  // The sinks whose pieces the tracker reads (the step fetches' and the counted fetches'): what
  // the nodes must forward.
  std::vector<std::string> sinks() const;

  // Starts the step clock (when the job starts).
  void Start();
  // A piece of a sink the nodes forward; pieces of other sinks are ignored.
  absl::Status OnPiece(const SinkPiece& piece);
  int64_t steps_done() const;

 private:
  explicit StepTracker(StepCollector collector) : collector_(std::move(collector)) {}

  int64_t num_steps_ = 0;
  std::optional<int64_t> tokens_per_step_;
  StepCallback on_step_;
  mutable std::mutex mutex_;
  StepCollector collector_;  // guarded by mutex_
  struct CountedFetch {
    FetchPieceAssembler pieces;
    std::function<void(const HostTensor&)> on_piece;
  };
  std::vector<CountedFetch> counted_;  // guarded by mutex_
  std::vector<std::string> sinks_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_STEP_TRACKER_H_
