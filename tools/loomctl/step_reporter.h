#ifndef LOOM_TOOLS_LOOMCTL_STEP_REPORTER_H_
#define LOOM_TOOLS_LOOMCTL_STEP_REPORTER_H_

// The step lines of training runs: StepLine and its text and JSON forms, the progress bar and its
// ETA, StepLinePrinter (lines printed above a bar redrawn in place), and StepReporter, which makes
// the lines of `loomctl run` from the sinks' loss pieces as steps finish. `loomctl submit --watch`
// and `loomctl watch` print a daemon's step events with StepLinePrinter.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "node/step_collector.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom::loomctl {

// One finished training step, as `loomctl run` prints it.
struct StepLine {
  // 1-based and counting the steps of earlier runs (a resumed run's first step is first_step + 1):
  // the state after step k is what DIR/step-<k>.safetensors holds.
  int64_t step = 0;
  int64_t last_step = 0;
  // The mean over the step's micro-batch pieces of the assembled (partial-summed) loss.
  double loss = 0;
  // The job's other scalar fetches, the same way (StepFetches).
  std::vector<StepScalar> scalars;
  // In a step that evaluates (Job.evaluation): the mean of the evaluated loss of a held-out batch.
  std::optional<double> validation_loss;
  double step_time_ms = 0;
  // Unset when the job reads no tokens (no token_file or token_dataset input).
  std::optional<double> tokens_per_second;
};

// "step 3/20  loss 5.43210  accuracy 0.8125  time 85.2 ms  tokens/s 12020", without a newline:
// the validation loss after the loss when the step has one ("loss 5.43210  val_loss 5.61234"),
// the scalar fetches by name after them (6 significant digits), tokens/s when known.
std::string FormatStepLineText(const StepLine& line);
// {"step":3,"loss":5.4321,"scalars":{"accuracy":0.8125},"step_time_ms":85.2,
// "tokens_per_second":12020.0}, without a newline; "validation_loss" after "loss" only when the
// step has one; tokens_per_second null when unset, non-finite values as null, "scalars" empty
// ({}) when the job fetches no other scalar.
std::string FormatStepLineJson(const StepLine& line);

// "[#########.....] 12/20 steps  loss 0.12345  tokens/s 12020  ETA 1m05s", without a newline;
// tokens/s only when known, the ETA only when `eta` is set.
std::string FormatProgressBar(const StepLine& line, std::optional<double> eta_seconds);
// "45s", "12m05s", "3h02m".
std::string FormatEta(double seconds);

// Prints step lines (text or JSON) and, on a terminal, a progress bar under them that shows the
// step, the loss, tokens/s and the ETA (the mean step time so far times the steps left). Used by
// `loomctl run` (through StepReporter) and by `loomctl submit --watch` for a daemon's step events.
// Not thread-safe.
class StepLinePrinter {
 public:
  struct Options {
    bool json = false;
    // Not null: where the lines go.
    std::ostream* out = nullptr;
    // Null: no progress bar. Else a terminal: the bar is redrawn in place on it after each step.
    std::ostream* progress = nullptr;
  };

  explicit StepLinePrinter(Options options) : options_(std::move(options)) {}

  // Clears the bar, prints the line (flushed), redraws the bar.
  void Print(const StepLine& line);
  // Prints a line that is not a step (e.g. a job's state change) to `out`, above the bar.
  void PrintOther(const std::string& text);
  // Clears the bar.
  void ClearProgress();

 private:
  void DrawProgress(const StepLine& line);

  const Options options_;
  bool progress_drawn_ = false;
  std::optional<StepLine> last_line_;
  // The steps printed and the sum of their times, for the ETA.
  int64_t steps_timed_ = 0;
  double seconds_timed_ = 0;
};

// Prints a line per training step as soon as the step's pieces (StepCollector: the loss's, the
// other scalar fetches' and, in a step that evaluates, the evaluated loss's) have reached every
// sink, from the sinks' callbacks (Callback()), and draws a progress bar. A run may be made of
// segments (one compiled plan each, the state carried over by checkpoints); steps are numbered
// across them.
//
// Thread-safe: OnPiece runs on the sinks' stream threads; the lines are written under a lock,
// each flushed when written.
class StepReporter {
 public:
  struct Options {
    // The number of the last step of the whole run (first_step + steps).
    int64_t last_step = 0;
    std::optional<int64_t> tokens_per_step;
    bool json = false;
    // Not null: where the lines go.
    std::ostream* out = nullptr;
    // Null: no progress bar. Else a terminal: the bar is redrawn in place on it after each step.
    std::ostream* progress = nullptr;
  };

  explicit StepReporter(Options options)
      : options_(options), printer_({options.json, options.out, options.progress}) {}

  // Starts a segment: its plan's StepFetchesOf the loss, its pieces per step
  // (Plan.num_micro_batches, 0 meaning 1), and the steps taken before it. The step clock starts
  // here. INVALID_ARGUMENT when the loss fetch is not a float32 scalar; INTERNAL when the job
  // evaluates and the plan's first step (StepFetches::first_step, from which it counts the steps
  // that evaluate) is not `first_step`.
  absl::Status BeginSegment(const StepFetches& fetches, int micro_batches_per_step,
                            int64_t first_step) ABSL_LOCKS_EXCLUDED(mutex_);
  // The segment's sinks: those whose pieces OnPiece reads (JobOptions::reported_sinks).
  std::vector<std::string> sinks() const ABSL_LOCKS_EXCLUDED(mutex_);
  // For JobOptions::sink_piece_callback: ignores sinks of other fetches; an error (a piece that
  // does not assemble) fails the job.
  absl::Status OnPiece(const SinkPiece& piece) ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends a segment: FAILED_PRECONDITION when some of its steps were never complete. Clears the
  // progress bar.
  absl::Status EndSegment(int64_t steps) ABSL_LOCKS_EXCLUDED(mutex_);

  // Every step's loss so far, in step order.
  std::vector<double> losses() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void Print(const FinishedStep& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);  // with mutex_ held

  const Options options_;
  mutable absl::Mutex mutex_;
  // The segment (guarded by mutex_).
  std::optional<StepCollector> collector_ ABSL_GUARDED_BY(mutex_);
  int64_t first_step_ ABSL_GUARDED_BY(mutex_) = 0;
  // The whole run.
  std::vector<double> losses_ ABSL_GUARDED_BY(mutex_);
  StepLinePrinter printer_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_STEP_REPORTER_H_
