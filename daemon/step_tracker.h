#ifndef LOOM_DAEMON_STEP_TRACKER_H_
#define LOOM_DAEMON_STEP_TRACKER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/loom/v1/job_service.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/tensor.h"

namespace loom::daemon {

// Turns the pieces the loss's sinks keep into one StepEvent per finished training step: a step is
// finished when every rank's sink holds every micro-batch piece of its loss. The loss is the mean
// over the step's micro-batches of the assembled (partial-summed) loss, as `loomctl run` prints it.
//
// Thread-safe: OnPiece runs on the sinks' stream threads; `on_step` is called under the tracker's
// lock, in step order, and must be quick.
class StepTracker {
 public:
  using StepCallback = std::function<void(const v1::StepEvent&)>;

  // `loss`: the plan's fetch of the loss (a float32 scalar, else INVALID_ARGUMENT).
  // `micro_batches_per_step`: Plan.num_micro_batches (0 means 1).
  static absl::StatusOr<std::unique_ptr<StepTracker>> Create(const plan::Fetch& loss,
                                                             int micro_batches_per_step,
                                                             int64_t num_steps,
                                                             std::optional<int64_t> tokens_per_step,
                                                             StepCallback on_step);

  // Starts the step clock (when the job starts).
  void Start();
  // For JobOptions::sink_piece_callback: ignores sinks of other fetches.
  absl::Status OnPiece(const SinkPiece& piece);
  SinkPieceCallback Callback();
  int64_t steps_done() const;

 private:
  StepTracker() = default;
  void EmitReadySteps();  // with mutex_ held

  plan::Fetch loss_;
  int micro_batches_ = 1;
  int64_t num_steps_ = 0;
  std::optional<int64_t> tokens_per_step_;
  StepCallback on_step_;
  absl::flat_hash_map<std::string, int> rank_of_sink_;

  mutable std::mutex mutex_;
  // Pieces that have not reached every rank yet: piece -> per rank.
  std::map<int64_t, std::vector<std::optional<HostTensor>>> pending_;
  // Step (0-based) -> the assembled losses of its pieces.
  std::map<int64_t, std::vector<double>> piece_losses_;
  int64_t next_step_ = 0;
  std::chrono::steady_clock::time_point last_completion_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_STEP_TRACKER_H_
