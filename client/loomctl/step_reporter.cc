#include "client/loomctl/step_reporter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fetch_assembly.h"

namespace loom::loomctl {
namespace {

constexpr int kProgressWidth = 30;

std::string JsonDouble(double value) {
  if (!std::isfinite(value)) return "null";
  std::string text = absl::StrFormat("%.9g", value);
  // Keep it a JSON number that reads as a float: 12020 -> 12020.0.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string FormatStepLineText(const StepLine& line) {
  std::string text = absl::StrFormat("step %d/%d  loss %.5f  time %.1f ms", line.step,
                                     line.last_step, line.loss, line.step_time_ms);
  if (line.tokens_per_second.has_value()) {
    absl::StrAppendFormat(&text, "  tokens/s %.0f", *line.tokens_per_second);
  }
  return text;
}

std::string FormatStepLineJson(const StepLine& line) {
  return absl::StrCat("{\"step\":", line.step, ",\"loss\":", JsonDouble(line.loss),
                      ",\"step_time_ms\":", JsonDouble(line.step_time_ms),
                      ",\"tokens_per_second\":",
                      line.tokens_per_second.has_value() ? JsonDouble(*line.tokens_per_second)
                                                         : std::string("null"),
                      "}");
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

absl::Status StepReporter::BeginSegment(const plan::Fetch& loss, int micro_batches_per_step,
                                        int64_t first_step) {
  if (Shape(loss.logical().shape()).NumElements() != 1 ||
      loss.logical().data_type() != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss.tensor(),
                                                   "' must be a float32 scalar, not ",
                                                   Shape(loss.logical().shape()).ToString()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  loss_ = loss;
  micro_batches_ = std::max(micro_batches_per_step, 1);
  first_step_ = first_step;
  rank_of_sink_.clear();
  for (int rank = 0; rank < loss.sinks_size(); ++rank) rank_of_sink_[loss.sinks(rank)] = rank;
  pending_.clear();
  piece_losses_.clear();
  next_step_ = 0;
  last_completion_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

SinkPieceCallback StepReporter::Callback() {
  return [this](const SinkPiece& piece) { return OnPiece(piece); };
}

absl::Status StepReporter::OnPiece(const SinkPiece& piece) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto rank = rank_of_sink_.find(piece.sink);
  if (rank == rank_of_sink_.end() || piece.input != 0) return absl::OkStatus();
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

void StepReporter::EmitReadySteps() {
  while (true) {
    auto step = piece_losses_.find(next_step_);
    if (step == piece_losses_.end() || static_cast<int>(step->second.size()) < micro_batches_) {
      return;
    }
    auto now = std::chrono::steady_clock::now();
    StepLine line;
    line.step = first_step_ + next_step_ + 1;
    line.last_step = options_.last_step;
    line.loss = std::accumulate(step->second.begin(), step->second.end(), 0.0) /
                static_cast<double>(step->second.size());
    line.step_time_ms = std::chrono::duration<double, std::milli>(now - last_completion_).count();
    if (options_.tokens_per_step.has_value() && line.step_time_ms > 0) {
      line.tokens_per_second =
          static_cast<double>(*options_.tokens_per_step) / (line.step_time_ms / 1000.0);
    }
    last_completion_ = now;
    losses_.push_back(line.loss);
    piece_losses_.erase(step);
    ++next_step_;

    ClearProgress();
    *options_.out << (options_.json ? FormatStepLineJson(line) : FormatStepLineText(line)) << "\n";
    options_.out->flush();
    DrawProgress();
  }
}

void StepReporter::DrawProgress() {
  if (options_.progress == nullptr || options_.last_step <= 0 || losses_.empty()) return;
  const int64_t done = first_step_ + next_step_;
  const int filled = static_cast<int>(kProgressWidth * done / options_.last_step);
  std::string bar(filled, '#');
  bar.resize(kProgressWidth, '.');
  *options_.progress << absl::StrFormat("\r[%s] %d/%d steps  loss %.5f", bar, done,
                                        options_.last_step, losses_.back())
                     << std::flush;
  progress_drawn_ = true;
}

void StepReporter::ClearProgress() {
  if (!progress_drawn_) return;
  *options_.progress << "\r\033[K" << std::flush;
  progress_drawn_ = false;
}

absl::Status StepReporter::EndSegment(int64_t steps) {
  std::lock_guard<std::mutex> lock(mutex_);
  ClearProgress();
  if (next_step_ < steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("only ", next_step_, " of the ", steps, " steps from step ", first_step_ + 1,
                     " delivered the loss '", loss_.tensor(), "' to every sink"));
  }
  return absl::OkStatus();
}

std::vector<double> StepReporter::losses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return losses_;
}

}  // namespace loom::loomctl
