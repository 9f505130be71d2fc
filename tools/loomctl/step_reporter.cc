#include "tools/loomctl/step_reporter.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/json_string.h"

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
  std::string text = absl::StrFormat("step %d/%d  loss %.5f", line.step, line.last_step, line.loss);
  if (line.validation_loss.has_value()) {
    absl::StrAppendFormat(&text, "  val_loss %.5f", *line.validation_loss);
  }
  for (const StepScalar& scalar : line.scalars) {
    absl::StrAppendFormat(&text, "  %s %.6g", scalar.tensor, scalar.value);
  }
  absl::StrAppendFormat(&text, "  time %.1f ms", line.step_time_ms);
  if (line.tokens_per_second.has_value()) {
    absl::StrAppendFormat(&text, "  tokens/s %.0f", *line.tokens_per_second);
  }
  return text;
}

std::string FormatStepLineJson(const StepLine& line) {
  std::vector<std::string> scalars;
  for (const StepScalar& scalar : line.scalars) {
    scalars.push_back(absl::StrCat(JsonString(scalar.tensor), ":", JsonDouble(scalar.value)));
  }
  return absl::StrCat("{\"step\":", line.step, ",\"loss\":", JsonDouble(line.loss),
                      line.validation_loss.has_value()
                          ? absl::StrCat(",\"validation_loss\":", JsonDouble(*line.validation_loss))
                          : std::string(),
                      ",\"scalars\":{", absl::StrJoin(scalars, ","), "}",
                      ",\"step_time_ms\":", JsonDouble(line.step_time_ms),
                      ",\"tokens_per_second\":",
                      line.tokens_per_second.has_value() ? JsonDouble(*line.tokens_per_second)
                                                         : std::string("null"),
                      "}");
}

std::string FormatEta(double seconds) {
  const int64_t total = std::max<int64_t>(0, static_cast<int64_t>(std::llround(seconds)));
  if (total < 60) return absl::StrFormat("%ds", total);
  if (total < 3600) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%dh%02dm", total / 3600, total % 3600 / 60);
}

std::string FormatProgressBar(const StepLine& line, std::optional<double> eta_seconds) {
  const int64_t done = std::clamp<int64_t>(line.step, 0, std::max<int64_t>(line.last_step, 0));
  const int filled =
      line.last_step > 0 ? static_cast<int>(kProgressWidth * done / line.last_step) : 0;
  std::string bar(filled, '#');
  bar.resize(kProgressWidth, '.');
  std::string text =
      absl::StrFormat("[%s] %d/%d steps  loss %.5f", bar, line.step, line.last_step, line.loss);
  if (line.tokens_per_second.has_value()) {
    absl::StrAppendFormat(&text, "  tokens/s %.0f", *line.tokens_per_second);
  }
  if (eta_seconds.has_value()) absl::StrAppend(&text, "  ETA ", FormatEta(*eta_seconds));
  return text;
}

void StepLinePrinter::Print(const StepLine& line) {
  ClearProgress();
  *options_.out << (options_.json ? FormatStepLineJson(line) : FormatStepLineText(line)) << "\n";
  options_.out->flush();
  ++steps_timed_;
  seconds_timed_ += line.step_time_ms / 1000.0;
  last_line_ = line;
  DrawProgress(line);
}

void StepLinePrinter::PrintOther(const std::string& text) {
  ClearProgress();
  *options_.out << text << "\n";
  options_.out->flush();
  if (last_line_.has_value()) DrawProgress(*last_line_);
}

void StepLinePrinter::DrawProgress(const StepLine& line) {
  if (options_.progress == nullptr || line.last_step <= 0) return;
  std::optional<double> eta;
  if (steps_timed_ > 0) {
    eta = seconds_timed_ / static_cast<double>(steps_timed_) *
          static_cast<double>(std::max<int64_t>(line.last_step - line.step, 0));
  }
  *options_.progress << "\r" << FormatProgressBar(line, eta) << std::flush;
  progress_drawn_ = true;
}

void StepLinePrinter::ClearProgress() {
  if (!progress_drawn_) return;
  *options_.progress << "\r\033[K" << std::flush;
  progress_drawn_ = false;
}

absl::Status StepReporter::BeginSegment(const StepFetches& fetches, int micro_batches_per_step,
                                        int64_t first_step) {
  if (fetches.evaluation.has_value() && fetches.first_step != first_step) {
    return absl::InternalError(absl::StrCat(
        "the plan starts at step ", fetches.first_step + 1, " (Plan.first_step + 1) but its ",
        "segment at step ", first_step + 1, ": the steps that evaluate would be miscounted"));
  }
  absl::StatusOr<StepCollector> collector = StepCollector::Create(fetches, micro_batches_per_step);
  if (!collector.ok()) return collector.status();
  absl::MutexLock lock(&mutex_);
  collector_ = std::move(*collector);
  first_step_ = first_step;
  return absl::OkStatus();
}

std::vector<std::string> StepReporter::sinks() const {
  absl::MutexLock lock(&mutex_);
  return collector_.has_value() ? collector_->sinks() : std::vector<std::string>();
}

absl::Status StepReporter::OnPiece(const SinkPiece& piece) {
  absl::MutexLock lock(&mutex_);
  if (!collector_.has_value()) return absl::FailedPreconditionError("no segment has begun");
  absl::StatusOr<std::vector<FinishedStep>> finished = collector_->Add(piece);
  if (!finished.ok()) return finished.status();
  for (const FinishedStep& step : *finished) Print(step);
  return absl::OkStatus();
}

void StepReporter::Print(const FinishedStep& step) {
  StepLine line;
  line.step = first_step_ + step.index + 1;
  line.last_step = options_.last_step;
  line.loss = step.loss;
  line.scalars = step.scalars;
  line.validation_loss = step.validation_loss;
  line.step_time_ms = step.seconds * 1000.0;
  if (options_.tokens_per_step.has_value() && step.seconds > 0) {
    line.tokens_per_second = static_cast<double>(*options_.tokens_per_step) / step.seconds;
  }
  losses_.push_back(line.loss);
  printer_.Print(line);
}

absl::Status StepReporter::EndSegment(int64_t steps) {
  absl::MutexLock lock(&mutex_);
  printer_.ClearProgress();
  const int64_t done = collector_.has_value() ? collector_->steps_done() : 0;
  if (done < steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("only ", done, " of the ", steps, " steps from step ", first_step_ + 1,
                     " delivered the loss '", collector_.has_value() ? collector_->loss_name() : "",
                     "' and the other scalar fetches to every sink"));
  }
  return absl::OkStatus();
}

std::vector<double> StepReporter::losses() const {
  absl::MutexLock lock(&mutex_);
  return losses_;
}

}  // namespace loom::loomctl
