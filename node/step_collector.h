#ifndef LOOM_NODE_STEP_COLLECTOR_H_
#define LOOM_NODE_STEP_COLLECTOR_H_

// The steps of a training run as they finish: StepCollector turns the pieces that the sinks of the
// loss, the other scalar fetches and the evaluated loss keep into FinishedSteps (the step's loss,
// scalars, validation loss and time), what `loomctl run` prints and loomd streams as step events.
// StepFetchesOf picks those fetches from a plan; TokensPerStep gives the tokens a step reads.

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
// (Fetch.summed_over_step: counts); and in the steps that evaluate (Job.evaluation), the mean of
// the evaluated loss.
struct StepFetches {
  plan::Fetch loss;
  // Every other fetch of one element, in the plan's order (not the evaluated loss).
  std::vector<plan::Fetch> scalars;
  // The evaluated loss (Fetch.evaluation), when the job evaluates: its sinks keep pieces in the
  // steps that evaluate only.
  std::optional<plan::Fetch> evaluation = std::nullopt;
  // With `evaluation` (Plan.evaluation_every_steps, Plan.first_step): step t of the whole training
  // (0-based: first_step plus the collector's step index) evaluates when t % every_steps == 0.
  int64_t evaluation_every_steps = 0;
  int64_t first_step = 0;
};
// `plan`'s StepFetches for the loss named `loss`, with its evaluation fetch. INTERNAL (the plan is
// inconsistent) when the plan does not fetch the loss, has more than one evaluation fetch, or has
// an evaluation fetch without evaluation_every_steps > 0 or the other way round.
absl::StatusOr<StepFetches> StepFetchesOf(const plan::Plan& plan, const std::string& loss);

// A step's value of a scalar fetch.
struct StepScalar {
  std::string tensor;
  double value = 0;
};

// A training step whose loss and scalar fetches (and evaluated loss, when it evaluates) have
// reached every sink.
struct FinishedStep {
  int64_t index = 0;  // 0-based, counted from the collector's creation
  // The mean over the step's micro-batches of the assembled (partial-summed) loss.
  double loss = 0;
  // The same (or the sum, Fetch.summed_over_step) for each of StepFetches::scalars, in their
  // order.
  std::vector<StepScalar> scalars;
  // In a step that evaluates: the mean over its micro-batches of the assembled evaluated loss.
  std::optional<double> validation_loss;
  // Since the previous finished step (the first: since creation or RestartClock).
  double seconds = 0;
};

// Turns the pieces that the step fetches' sinks keep (JobOptions::sink_piece_callback) into
// finished steps: a step is finished when every rank's sink holds every micro-batch piece of its
// loss and of each scalar fetch, and in a step that evaluates, of the evaluated loss too (the
// other steps never wait for it). What `loomctl run` prints and what `loomd` streams as step
// events. Not thread-safe: the owner serialises Add (sinks call back from their stream threads).
class StepCollector {
 public:
  // `fetches.loss` and `fetches.evaluation` must be float32 scalars, and evaluation_every_steps
  // > 0 with an evaluation (else INVALID_ARGUMENT naming the fetch); `micro_batches_per_step`:
  // Plan.num_micro_batches (0 means 1).
  static absl::StatusOr<StepCollector> Create(const StepFetches& fetches,
                                              int micro_batches_per_step);

  // Records a piece (pieces of other fetches are ignored) and returns the steps it finished, in
  // order. An error when the ranks' pieces do not assemble, and INTERNAL for a piece of the
  // evaluated loss in a step that does not evaluate (the plan and the runtime disagree).
  absl::StatusOr<std::vector<FinishedStep>> Add(const SinkPiece& piece);
  // The next step's time runs from now.
  void RestartClock() { last_completion_ = std::chrono::steady_clock::now(); }
  int64_t steps_done() const { return next_step_; }
  const std::string& loss_name() const { return fetches_.front().fetch().tensor(); }
  // The sinks whose pieces Add reads: the loss's, the scalar fetches' and the evaluated loss's.
  std::vector<std::string> sinks() const;
  // Hands every assembled piece of the step fetch `tensor` to `on_piece` too (in Add). False, and
  // nothing changes, when `tensor` is not one of the collector's fetches.
  bool ObservePieces(const std::string& tensor, std::function<void(const HostTensor&)> on_piece);

 private:
  explicit StepCollector(int micro_batches) : micro_batches_(micro_batches) {}

  // Whether fetches_[position] is the evaluated loss.
  bool IsEvaluation(size_t position) const {
    return evaluation_every_steps_ > 0 && position + 1 == fetches_.size();
  }
  // Whether the collector's step `step` (0-based) evaluates.
  bool Evaluates(int64_t step) const {
    return evaluation_every_steps_ > 0 && (first_step_ + step) % evaluation_every_steps_ == 0;
  }
  // INTERNAL when `piece` is the evaluated loss's in a step that does not evaluate.
  absl::Status CheckEvaluationPiece(const SinkPiece& piece) const;

  // The loss first, then the scalar fetches, then the evaluated loss when the job evaluates; and
  // for each, what ObservePieces gave it (or null).
  std::vector<FetchPieceAssembler> fetches_;
  std::vector<std::function<void(const HostTensor&)>> observers_;
  int micro_batches_ = 1;
  // StepFetches::evaluation_every_steps (0: no evaluation) and first_step.
  int64_t evaluation_every_steps_ = 0;
  int64_t first_step_ = 0;
  // Step -> for each of fetches_, the assembled values of the step's pieces so far.
  std::map<int64_t, std::vector<std::vector<double>>> step_values_;
  int64_t next_step_ = 0;
  std::chrono::steady_clock::time_point last_completion_;
};

// The tokens one step reads: over the job's inputs read from a token file as model inputs (not
// targets, nor the held-out inputs of its evaluation, Input.evaluation), the product of their
// shapes ([B, T]: B * T). Unset when there are none.
std::optional<int64_t> TokensPerStep(const job::Job& job);

}  // namespace loom

#endif  // LOOM_NODE_STEP_COLLECTOR_H_
