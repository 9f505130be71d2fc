#include "node/step_collector.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "node/tensor_statistics.h"

namespace loom {

namespace {

bool IsScalar(const plan::Fetch& fetch) {
  return Shape(fetch.logical().shape()).NumElements() == 1;
}

// INVALID_ARGUMENT unless `fetch` (the `role`) is a float32 scalar.
absl::Status CheckFloat32Scalar(const plan::Fetch& fetch, const char* role) {
  if (IsScalar(fetch) && fetch.logical().data_type() == plan::FLOAT32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the ", role, " '", fetch.tensor(),
                                                 "' must be a float32 scalar, not ",
                                                 Shape(fetch.logical().shape()).ToString()));
}

// The one value of a scalar fetch's assembled piece, as a double (NaN when it is malformed).
double ScalarValue(const HostTensor& tensor) {
  absl::StatusOr<TensorStatistics> statistics = ComputeStatistics(tensor);
  return statistics.ok() ? statistics->mean : std::numeric_limits<double>::quiet_NaN();
}

double Sum(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

double Mean(const std::vector<double>& values) {
  return Sum(values) / static_cast<double>(values.size());
}

}  // namespace

absl::StatusOr<StepFetches> StepFetchesOf(const plan::Plan& plan, const std::string& loss) {
  StepFetches fetches;
  bool found = false;
  for (const plan::Fetch& fetch : plan.fetches()) {
    if (fetch.evaluation()) {
      if (fetches.evaluation.has_value()) {
        return absl::InternalError(absl::StrCat("the plan has two evaluation fetches, '",
                                                fetches.evaluation->tensor(), "' and '",
                                                fetch.tensor(), "'"));
      }
      fetches.evaluation = fetch;
    } else if (fetch.tensor() == loss) {
      fetches.loss = fetch;
      found = true;
    } else if (IsScalar(fetch)) {
      fetches.scalars.push_back(fetch);
    }
  }
  if (!found) {
    return absl::InternalError(absl::StrCat("the plan does not fetch the loss '", loss, "'"));
  }
  if (fetches.evaluation.has_value() != (plan.evaluation_every_steps() > 0)) {
    return absl::InternalError(absl::StrCat(
        "the plan evaluates every ", plan.evaluation_every_steps(), " steps but ",
        fetches.evaluation.has_value()
            ? absl::StrCat("has the evaluation fetch '", fetches.evaluation->tensor(), "'")
            : std::string("has no evaluation fetch")));
  }
  fetches.evaluation_every_steps = plan.evaluation_every_steps();
  fetches.first_step = plan.first_step();
  return fetches;
}

absl::StatusOr<StepCollector> StepCollector::Create(const StepFetches& fetches,
                                                    int micro_batches_per_step) {
  if (absl::Status loss = CheckFloat32Scalar(fetches.loss, "loss"); !loss.ok()) return loss;
  StepCollector collector(std::max(micro_batches_per_step, 1));
  collector.fetches_.emplace_back(fetches.loss);
  for (const plan::Fetch& scalar : fetches.scalars) collector.fetches_.emplace_back(scalar);
  if (fetches.evaluation.has_value()) {
    const plan::Fetch& evaluation = *fetches.evaluation;
    if (absl::Status checked = CheckFloat32Scalar(evaluation, "evaluated loss"); !checked.ok()) {
      return checked;
    }
    if (fetches.evaluation_every_steps <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("the evaluated loss '", evaluation.tensor(),
                                                     "' needs evaluation_every_steps > 0, not ",
                                                     fetches.evaluation_every_steps));
    }
    collector.fetches_.emplace_back(evaluation);
    collector.evaluation_every_steps_ = fetches.evaluation_every_steps;
    collector.first_step_ = fetches.first_step;
  }
  collector.observers_.resize(collector.fetches_.size());
  collector.RestartClock();
  return collector;
}

std::vector<std::string> StepCollector::sinks() const {
  std::vector<std::string> sinks;
  for (const FetchPieceAssembler& fetch : fetches_) {
    sinks.insert(sinks.end(), fetch.fetch().sinks().begin(), fetch.fetch().sinks().end());
  }
  return sinks;
}

bool StepCollector::ObservePieces(const std::string& tensor,
                                  std::function<void(const HostTensor&)> on_piece) {
  for (size_t position = 0; position < fetches_.size(); ++position) {
    if (fetches_[position].fetch().tensor() != tensor) continue;
    observers_[position] = std::move(on_piece);
    return true;
  }
  return false;
}

absl::Status StepCollector::CheckEvaluationPiece(const SinkPiece& piece) const {
  if (evaluation_every_steps_ <= 0) return absl::OkStatus();
  const plan::Fetch& evaluation = fetches_.back().fetch();
  const int64_t step = piece.piece / micro_batches_;
  const auto& sinks = evaluation.sinks();
  const bool evaluation_piece = std::find(sinks.begin(), sinks.end(), piece.sink) != sinks.end();
  if (!evaluation_piece || Evaluates(step)) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "sink '", piece.sink, "' of the evaluated loss '", evaluation.tensor(), "' kept piece ",
      piece.piece, ", of step ", first_step_ + step + 1, ", which does not evaluate (every ",
      evaluation_every_steps_, " steps, from step 1): the plan and the runtime disagree"));
}

absl::StatusOr<std::vector<FinishedStep>> StepCollector::Add(const SinkPiece& piece) {
  if (absl::Status checked = CheckEvaluationPiece(piece); !checked.ok()) return checked;
  std::vector<FinishedStep> finished;
  for (size_t position = 0; position < fetches_.size(); ++position) {
    absl::StatusOr<std::optional<AssembledPiece>> assembled = fetches_[position].Add(piece);
    if (!assembled.ok()) return assembled.status();
    if (!assembled->has_value()) continue;
    if (observers_[position]) observers_[position]((*assembled)->tensor);
    std::vector<std::vector<double>>& values = step_values_[(*assembled)->piece / micro_batches_];
    values.resize(fetches_.size());
    values[position].push_back(ScalarValue((*assembled)->tensor));
  }

  // Every fetch has the step's micro-batches, but the evaluated loss none in a step that does not
  // evaluate.
  auto complete = [this](int64_t step, const std::vector<std::vector<double>>& values) {
    if (values.size() != fetches_.size()) return false;
    for (size_t position = 0; position < values.size(); ++position) {
      const int expected = IsEvaluation(position) && !Evaluates(step) ? 0 : micro_batches_;
      if (static_cast<int>(values[position].size()) != expected) return false;
    }
    return true;
  };
  for (auto step = step_values_.find(next_step_);
       step != step_values_.end() && complete(next_step_, step->second);
       step = step_values_.find(next_step_)) {
    const auto now = std::chrono::steady_clock::now();
    FinishedStep done;
    done.index = next_step_;
    done.loss = Mean(step->second[0]);
    for (size_t position = 1; position < fetches_.size(); ++position) {
      const plan::Fetch& fetch = fetches_[position].fetch();
      const std::vector<double>& pieces = step->second[position];
      if (IsEvaluation(position)) {
        if (Evaluates(next_step_)) done.validation_loss = Mean(pieces);
        continue;
      }
      done.scalars.push_back(
          {fetch.tensor(), fetch.summed_over_step() ? Sum(pieces) : Mean(pieces)});
    }
    done.seconds = std::chrono::duration<double>(now - last_completion_).count();
    finished.push_back(std::move(done));
    last_completion_ = now;
    step_values_.erase(step);
    ++next_step_;
  }
  return finished;
}

std::optional<int64_t> TokensPerStep(const job::Job& job) {
  std::optional<int64_t> tokens;
  for (const job::Input& input : job.inputs()) {
    const bool reads_tokens =
        (input.has_token_file() || input.has_token_dataset()) && !input.evaluation();
    const bool targets =
        input.has_token_file() ? input.token_file().targets() : input.token_dataset().targets();
    if (!reads_tokens || targets) continue;
    int64_t product = 1;
    for (int64_t extent : input.shape()) product *= extent;
    tokens = tokens.value_or(0) + product;
  }
  return tokens;
}

}  // namespace loom
