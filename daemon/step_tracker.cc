#include "daemon/step_tracker.h"

namespace loom::daemon {

absl::StatusOr<std::unique_ptr<StepTracker>> StepTracker::Create(
    const StepFetches& fetches, int micro_batches_per_step, int64_t num_steps,
    std::optional<int64_t> tokens_per_step, StepCallback on_step) {
  absl::StatusOr<StepCollector> collector = StepCollector::Create(fetches, micro_batches_per_step);
  if (!collector.ok()) return collector.status();
  std::unique_ptr<StepTracker> tracker(new StepTracker(std::move(*collector)));
  tracker->num_steps_ = num_steps;
  tracker->tokens_per_step_ = tokens_per_step;
  tracker->on_step_ = std::move(on_step);
  tracker->sinks_ = tracker->collector_.sinks();
  return tracker;
}

void StepTracker::AddCountedFetch(const plan::Fetch& fetch,
                                  std::function<void(const HostTensor&)> on_piece) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A scalar counted fetch is a step fetch too: the collector assembles it once for both.
  if (collector_.ObservePieces(fetch.tensor(), on_piece)) return;
  counted_.push_back(CountedFetch{FetchPieceAssembler(fetch), std::move(on_piece)});
  sinks_.insert(sinks_.end(), fetch.sinks().begin(), fetch.sinks().end());
}

std::vector<std::string> StepTracker::sinks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sinks_;
}

void StepTracker::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  collector_.RestartClock();
}

int64_t StepTracker::steps_done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return collector_.steps_done();
}

absl::Status StepTracker::OnPiece(const SinkPiece& piece) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (CountedFetch& counted : counted_) {
    absl::StatusOr<std::optional<AssembledPiece>> assembled = counted.pieces.Add(piece);
    if (!assembled.ok()) return assembled.status();
    if (assembled->has_value()) counted.on_piece((*assembled)->tensor);
  }
  absl::StatusOr<std::vector<FinishedStep>> finished = collector_.Add(piece);
  if (!finished.ok()) return finished.status();
  for (const FinishedStep& step : *finished) {
    v1::StepEvent event;
    event.set_step(step.index + 1);
    event.set_num_steps(num_steps_);
    event.set_loss(step.loss);
    for (const StepScalar& scalar : step.scalars) {
      v1::StepScalar* added = event.add_scalars();
      added->set_tensor(scalar.tensor);
      added->set_value(scalar.value);
    }
    if (step.validation_loss.has_value()) event.set_validation_loss(*step.validation_loss);
    event.set_step_time_seconds(step.seconds);
    if (tokens_per_step_.has_value() && step.seconds > 0) {
      event.set_tokens_per_second(static_cast<double>(*tokens_per_step_) / step.seconds);
    }
    on_step_(event);
  }
  return absl::OkStatus();
}

}  // namespace loom::daemon
