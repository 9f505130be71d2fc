#include "kernels/cpu/optimizers/optimizer_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

absl::StatusOr<double> CheckFinite(absl::string_view op_type, const std::string& name,
                                   const absl::StatusOr<double>& value) {
  if (!value.ok()) return WithOpType(op_type, value.status());
  if (!std::isfinite(*value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute '", name, "' must be finite, got ", *value));
  }
  return *value;
}

}  // namespace

absl::Status CheckElementwiseUpdate(absl::string_view op_type, const KernelInit& init,
                                    const std::vector<absl::string_view>& input_names,
                                    const std::vector<absl::string_view>& output_names) {
  absl::Status status = CheckArity(op_type, init, static_cast<int>(input_names.size()),
                                   static_cast<int>(output_names.size()));
  if (!status.ok()) return status;
  for (size_t index = 0; index < input_names.size(); ++index) {
    status = CheckDataType(op_type, absl::StrCat("input '", input_names[index], "'"),
                           init.inputs[index], plan::FLOAT32);
    if (!status.ok()) return status;
  }
  for (size_t index = 0; index < output_names.size(); ++index) {
    status = CheckDataType(op_type, absl::StrCat("output '", output_names[index], "'"),
                           init.outputs[index], plan::FLOAT32);
    if (!status.ok()) return status;
  }
  const Shape param = Shape::FromProto(init.inputs[0]);
  const std::string param_name = absl::StrCat("input '", input_names[0], "'");
  for (size_t index = 1; index < input_names.size(); ++index) {
    status =
        CheckSameShape(op_type, param_name, param, absl::StrCat("input '", input_names[index], "'"),
                       Shape::FromProto(init.inputs[index]));
    if (!status.ok()) return status;
  }
  for (size_t index = 0; index < output_names.size(); ++index) {
    status = CheckSameShape(op_type, param_name, param,
                            absl::StrCat("output '", output_names[index], "'"),
                            Shape::FromProto(init.outputs[index]));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CheckStepPiece(absl::string_view op_type, int64_t piece) {
  if (piece < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": the piece is the index of the training step and must be >= 0, got ", piece));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GetFirstStep(absl::string_view op_type, const Attributes& attributes) {
  absl::StatusOr<int64_t> first_step = attributes.GetInt("first_step", 0);
  if (!first_step.ok()) return WithOpType(op_type, first_step.status());
  if (*first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'first_step' must be >= 0, got ", *first_step));
  }
  return *first_step;
}

absl::StatusOr<ScheduledLearningRate> GetLearningRate(absl::string_view op_type,
                                                      const Attributes& attributes) {
  ScheduledLearningRate rate;
  absl::StatusOr<double> peak = GetFiniteFloat(op_type, attributes, "lr");
  if (!peak.ok()) return peak.status();
  if (absl::Status status = CheckNonNegative(op_type, "lr", *peak); !status.ok()) return status;
  rate.peak = *peak;
  absl::StatusOr<int64_t> warmup = attributes.GetInt("lr_warmup_steps", 0);
  if (!warmup.ok()) return WithOpType(op_type, warmup.status());
  rate.schedule.warmup_steps = *warmup;
  absl::StatusOr<std::string> decay = attributes.GetString("lr_decay", "constant");
  if (!decay.ok()) return WithOpType(op_type, decay.status());
  absl::StatusOr<LearningRateDecay> parsed = ParseLearningRateDecay(*decay);
  if (!parsed.ok()) return WithOpType(op_type, parsed.status());
  rate.schedule.decay = *parsed;
  absl::StatusOr<int64_t> decay_steps = attributes.GetInt("lr_decay_steps", 0);
  if (!decay_steps.ok()) return WithOpType(op_type, decay_steps.status());
  rate.schedule.decay_steps = *decay_steps;
  absl::StatusOr<double> floor = GetFiniteFloat(op_type, attributes, "lr_min_ratio", 0.0);
  if (!floor.ok()) return floor.status();
  rate.schedule.min_ratio = *floor;
  if (absl::Status status = ValidateLearningRateSchedule(rate.schedule); !status.ok()) {
    return WithOpType(op_type, status);
  }
  return rate;
}

absl::StatusOr<double> GetFiniteFloat(absl::string_view op_type, const Attributes& attributes,
                                      const std::string& name) {
  return CheckFinite(op_type, name, attributes.GetFloat(name));
}

absl::StatusOr<double> GetFiniteFloat(absl::string_view op_type, const Attributes& attributes,
                                      const std::string& name, double default_value) {
  return CheckFinite(op_type, name, attributes.GetFloat(name, default_value));
}

absl::Status CheckNonNegative(absl::string_view op_type, absl::string_view name, double value) {
  if (!(value >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute '", name, "' must be >= 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckPositive(absl::string_view op_type, absl::string_view name, double value) {
  if (!(value > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute '", name, "' must be > 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckDecayRate(absl::string_view op_type, absl::string_view name, double value) {
  if (!(value >= 0.0 && value < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute '", name, "' must be in [0, 1), got ", value));
  }
  return absl::OkStatus();
}

}  // namespace loom::cpu
