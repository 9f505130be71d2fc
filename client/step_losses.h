#ifndef LOOM_CLIENT_STEP_LOSSES_H_
#define LOOM_CLIENT_STEP_LOSSES_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "client/fetch_pieces.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/tensor.h"

namespace loom {

// A training step whose loss has reached every sink.
struct FinishedStep {
  int64_t index = 0;  // 0-based, counted from the collector's creation
  // The mean over the step's micro-batches of the assembled (partial-summed) loss.
  double loss = 0;
  // Since the previous finished step (the first: since creation or RestartClock).
  double seconds = 0;
};

// Turns the pieces that the loss's sinks keep (JobOptions::sink_piece_callback) into finished
// steps: a step is finished when every rank's sink holds every micro-batch piece of its loss.
// What `loomctl run` prints and what `loomd` streams as step events. Not thread-safe: the owner
// serialises Add (sinks call back from their stream threads).
class StepLossCollector {
 public:
  // `loss`: the plan's fetch of the loss (a float32 scalar, else INVALID_ARGUMENT);
  // `micro_batches_per_step`: Plan.num_micro_batches (0 means 1).
  static absl::StatusOr<StepLossCollector> Create(const plan::Fetch& loss,
                                                  int micro_batches_per_step);

  // Records a piece (pieces of other fetches are ignored) and returns the steps it finished, in
  // order. An error when the ranks' pieces do not assemble.
  absl::StatusOr<std::vector<FinishedStep>> Add(const SinkPiece& piece);
  // The next step's time runs from now.
  void RestartClock() { last_completion_ = std::chrono::steady_clock::now(); }
  int64_t steps_done() const { return next_step_; }
  const std::string& loss_name() const { return pieces_.fetch().tensor(); }

 private:
  StepLossCollector(const plan::Fetch& loss, int micro_batches)
      : pieces_(loss), micro_batches_(micro_batches) {}

  FetchPieceAssembler pieces_;
  int micro_batches_ = 1;
  // Step -> the assembled losses of its pieces.
  std::map<int64_t, std::vector<double>> piece_losses_;
  int64_t next_step_ = 0;
  std::chrono::steady_clock::time_point last_completion_;
};

// The tokens one step reads: over the job's inputs read from a token file as model inputs (not
// targets), the product of their shapes ([B, T]: B * T). Unset when there are none.
std::optional<int64_t> TokensPerStep(const job::Job& job);

}  // namespace loom

#endif  // LOOM_CLIENT_STEP_LOSSES_H_
