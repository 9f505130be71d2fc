#ifndef LOOM_NODE_STEP_COLLECTOR_H_
#define LOOM_NODE_STEP_COLLECTOR_H_

// The steps of a training run as they finish: StepCollector turns the pieces that the sinks of the
// loss and the other scalar fetches keep into FinishedSteps (the step's loss, scalars and time),
// what `loomctl run` prints and loomd streams as step events. StepFetchesOf picks those fetches
// from a plan; TokensPerStep gives the tokens a step reads.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "node/fetch_pieces.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom {

// What a training step reports: its loss, and the plan's other scalar fetches (an accuracy, a
// count), each the mean over the step's micro-batches, or their sum for those the job sums
// (Fetch.summed_over_step: counts).
struct StepFetches {
  plan::Fetch loss;
  // Every other fetch of one element, in the plan's order.
  std::vector<plan::Fetch> scalars;
};
// `plan`'s StepFetches for the loss named `loss`: INTERNAL when the plan does not fetch it.
absl::StatusOr<StepFetches> StepFetchesOf(const plan::Plan& plan, const std::string& loss);

// A step's value of a scalar fetch.
struct StepScalar {
  std::string tensor;
  double value = 0;
};

// A training step whose loss and scalar fetches have reached every sink.
struct FinishedStep {
  int64_t index = 0;  // 0-based, counted from the collector's creation
  // The mean over the step's micro-batches of the assembled (partial-summed) loss.
  double loss = 0;
  // The same (or the sum, Fetch.summed_over_step) for each of StepFetches::scalars, in their
  // order.
  std::vector<StepScalar> scalars;
  // Since the previous finished step (the first: since creation or RestartClock).
  double seconds = 0;
};

// Turns the pieces that the step fetches' sinks keep (JobOptions::sink_piece_callback) into
// finished steps: a step is finished when every rank's sink holds every micro-batch piece of its
// loss and of each scalar fetch. What `loomctl run` prints and what `loomd` streams as step
// events. Not thread-safe: the owner serialises Add (sinks call back from their stream threads).
class StepCollector {
 public:
  // `fetches.loss` must be a float32 scalar (else INVALID_ARGUMENT naming it);
  // `micro_batches_per_step`: Plan.num_micro_batches (0 means 1).
  static absl::StatusOr<StepCollector> Create(const StepFetches& fetches,
                                              int micro_batches_per_step);

  // Records a piece (pieces of other fetches are ignored) and returns the steps it finished, in
  // order. An error when the ranks' pieces do not assemble.
  absl::StatusOr<std::vector<FinishedStep>> Add(const SinkPiece& piece);
  // The next step's time runs from now.
  void RestartClock() { last_completion_ = std::chrono::steady_clock::now(); }
  int64_t steps_done() const { return next_step_; }
  const std::string& loss_name() const { return fetches_.front().fetch().tensor(); }
  // The sinks whose pieces Add reads: the loss's and the scalar fetches'.
  std::vector<std::string> sinks() const;
  // Hands every assembled piece of the step fetch `tensor` to `on_piece` too (in Add). False, and
  // nothing changes, when `tensor` is not one of the collector's fetches.
  bool ObservePieces(const std::string& tensor, std::function<void(const HostTensor&)> on_piece);

 private:
  explicit StepCollector(int micro_batches) : micro_batches_(micro_batches) {}

  // The loss first, then the scalar fetches; and for each, what ObservePieces gave it (or null).
  std::vector<FetchPieceAssembler> fetches_;
  std::vector<std::function<void(const HostTensor&)>> observers_;
  int micro_batches_ = 1;
  // Step -> for each of fetches_, the assembled values of the step's pieces so far.
  std::map<int64_t, std::vector<std::vector<double>>> step_values_;
  int64_t next_step_ = 0;
  std::chrono::steady_clock::time_point last_completion_;
};

// The tokens one step reads: over the job's inputs read from a token file as model inputs (not
// targets), the product of their shapes ([B, T]: B * T). Unset when there are none.
std::optional<int64_t> TokensPerStep(const job::Job& job);

}  // namespace loom

#endif  // LOOM_NODE_STEP_COLLECTOR_H_
