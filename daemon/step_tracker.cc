#include "daemon/step_tracker.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/fetch_assembly.h"

namespace loom::daemon {

absl::StatusOr<std::unique_ptr<StepTracker>> StepTracker::Create(
    const plan::Fetch& loss, int micro_batches_per_step, int64_t num_steps,
    std::optional<int64_t> tokens_per_step, StepCallback on_step) {
  if (Shape(loss.logical().shape()).NumElements() != 1 ||
      loss.logical().data_type() != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss.tensor(),
                                                   "' must be a float32 scalar, not ",
                                                   Shape(loss.logical().shape()).ToString()));
  }
  std::unique_ptr<StepTracker> tracker(new StepTracker());
  tracker->loss_ = loss;
  tracker->micro_batches_ = std::max(micro_batches_per_step, 1);
  tracker->num_steps_ = num_steps;
  tracker->tokens_per_step_ = tokens_per_step;
  tracker->on_step_ = std::move(on_step);
  for (int rank = 0; rank < loss.sinks_size(); ++rank) {
    tracker->rank_of_sink_[loss.sinks(rank)] = rank;
  }
  tracker->last_completion_ = std::chrono::steady_clock::now();
  return tracker;
}

void StepTracker::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_completion_ = std::chrono::steady_clock::now();
}

SinkPieceCallback StepTracker::Callback() {
  return [this](const SinkPiece& piece) { return OnPiece(piece); };
}

int64_t StepTracker::steps_done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_step_;
}

absl::Status StepTracker::OnPiece(const SinkPiece& piece) {
  auto rank = rank_of_sink_.find(piece.sink);
  if (rank == rank_of_sink_.end() || piece.input != 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::optional<HostTensor>>& ranks = pending_[piece.piece];
  ranks.resize(rank_of_sink_.size());
  ranks[rank->second] = piece.tensor;
  for (const std::optional<HostTensor>& tensor : ranks) {
    if (!tensor.has_value()) return absl::OkStatus();
  }
  std::vector<const HostTensor*> pieces;
  for (const std::optional<HostTensor>& tensor : ranks) pieces.push_back(&*tensor);
  absl::StatusOr<HostTensor> loss = AssembleFetch(loss_, pieces);
  if (!loss.ok()) return loss.status();
  float value;
  std::memcpy(&value, loss->bytes.data(), sizeof(value));
  piece_losses_[piece.piece / micro_batches_].push_back(value);
  pending_.erase(piece.piece);
  EmitReadySteps();
  return absl::OkStatus();
}

void StepTracker::EmitReadySteps() {
  while (true) {
    auto step = piece_losses_.find(next_step_);
    if (step == piece_losses_.end() || static_cast<int>(step->second.size()) < micro_batches_) {
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_completion_).count();
    v1::StepEvent event;
    event.set_step(next_step_ + 1);
    event.set_num_steps(num_steps_);
    event.set_loss(std::accumulate(step->second.begin(), step->second.end(), 0.0) /
                   static_cast<double>(step->second.size()));
    event.set_step_time_seconds(seconds);
    if (tokens_per_step_.has_value() && seconds > 0) {
      event.set_tokens_per_second(static_cast<double>(*tokens_per_step_) / seconds);
    }
    last_completion_ = now;
    piece_losses_.erase(step);
    ++next_step_;
    on_step_(event);
  }
}

}  // namespace loom::daemon
