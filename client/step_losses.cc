#include "client/step_losses.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<StepLossCollector> StepLossCollector::Create(const plan::Fetch& loss,
                                                            int micro_batches_per_step) {
  if (Shape(loss.logical().shape()).NumElements() != 1 ||
      loss.logical().data_type() != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss.tensor(),
                                                   "' must be a float32 scalar, not ",
                                                   Shape(loss.logical().shape()).ToString()));
  }
  StepLossCollector collector(loss, std::max(micro_batches_per_step, 1));
  collector.RestartClock();
  return collector;
}

absl::StatusOr<std::vector<FinishedStep>> StepLossCollector::Add(const SinkPiece& piece) {
  std::vector<FinishedStep> finished;
  absl::StatusOr<std::optional<AssembledPiece>> loss = pieces_.Add(piece);
  if (!loss.ok()) return loss.status();
  if (!loss->has_value()) return finished;
  float value;
  std::memcpy(&value, (*loss)->tensor.bytes.data(), sizeof(value));
  piece_losses_[(*loss)->piece / micro_batches_].push_back(value);

  for (auto step = piece_losses_.find(next_step_);
       step != piece_losses_.end() && static_cast<int>(step->second.size()) == micro_batches_;
       step = piece_losses_.find(next_step_)) {
    const auto now = std::chrono::steady_clock::now();
    finished.push_back(FinishedStep{next_step_,
                                    std::accumulate(step->second.begin(), step->second.end(), 0.0) /
                                        static_cast<double>(step->second.size()),
                                    std::chrono::duration<double>(now - last_completion_).count()});
    last_completion_ = now;
    piece_losses_.erase(step);
    ++next_step_;
  }
  return finished;
}

std::optional<int64_t> TokensPerStep(const job::Job& job) {
  std::optional<int64_t> tokens;
  for (const job::Input& input : job.inputs()) {
    if (!input.has_token_file() || input.token_file().targets()) continue;
    int64_t product = 1;
    for (int64_t extent : input.shape()) product *= extent;
    tokens = tokens.value_or(0) + product;
  }
  return tokens;
}

}  // namespace loom
