#include "kernels/cpu/data/batch_window.h"

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {

absl::StatusOr<BatchWindow> ParseBatchWindow(const char* op_type, const plan::KernelConf& conf,
                                             int num_outputs) {
  Attributes attributes(conf);
  BatchWindow window;
  absl::StatusOr<int64_t> global_batch = attributes.GetInt("global_batch");
  if (!global_batch.ok()) return WithOpType(op_type, global_batch.status());
  absl::StatusOr<int64_t> sequence = attributes.GetInt("sequence");
  if (!sequence.ok()) return WithOpType(op_type, sequence.status());
  if (*global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'global_batch' must be >= 1, got ", *global_batch));
  }
  if (*sequence < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'sequence' must be >= 1, got ", *sequence));
  }
  window.global_batch = *global_batch;
  window.sequence = *sequence;

  absl::StatusOr<int64_t> sample_begin = attributes.GetInt("sample_begin", 0);
  if (!sample_begin.ok()) return WithOpType(op_type, sample_begin.status());
  absl::StatusOr<int64_t> sample_count = attributes.GetInt("sample_count", *global_batch);
  if (!sample_count.ok()) return WithOpType(op_type, sample_count.status());
  if (*sample_begin < 0 || *sample_count < 0 || *sample_begin > *global_batch ||
      *sample_count > *global_batch - *sample_begin) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": sample_begin ", *sample_begin, " and sample_count ", *sample_count,
                     " do not select a window of the global batch of ", *global_batch, " samples"));
  }
  window.sample_begin = *sample_begin;
  window.sample_count = *sample_count;

  absl::StatusOr<int64_t> micro_batches = attributes.GetInt("micro_batches", 1);
  if (!micro_batches.ok()) return WithOpType(op_type, micro_batches.status());
  if (*micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'micro_batches' must be >= 1, got ", *micro_batches));
  }
  if (window.sample_count % *micro_batches != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": sample_count ", window.sample_count,
                                                   " is not divisible by micro_batches ",
                                                   *micro_batches));
  }
  window.micro_batches = *micro_batches;
  window.samples_per_piece = window.sample_count / window.micro_batches;

  absl::StatusOr<int64_t> first_step = attributes.GetInt("first_step", 0);
  if (!first_step.ok()) return WithOpType(op_type, first_step.status());
  if (*first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'first_step' must be >= 0, got ", *first_step));
  }
  window.first_step = *first_step;
  absl::StatusOr<int64_t> steps_per_batch = attributes.GetInt("steps_per_batch", 1);
  if (!steps_per_batch.ok()) return WithOpType(op_type, steps_per_batch.status());
  if (*steps_per_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": attribute 'steps_per_batch' must be >= 1, got ", *steps_per_batch));
  }
  window.steps_per_batch = *steps_per_batch;

  if (num_outputs == 2 && attributes.Has("targets")) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type,
        ": attribute 'targets' selects the output of the one-output form, but this task "
        "has two outputs (x and y)"));
  }
  absl::StatusOr<bool> targets = attributes.GetBool("targets", false);
  if (!targets.ok()) return WithOpType(op_type, targets.status());
  window.targets = *targets;
  return window;
}

absl::Status CheckBatchOutputs(const char* op_type, const KernelInit& init,
                               const BatchWindow& window) {
  const int num_outputs = NumBatchOutputs(init);
  const Shape expected({window.samples_per_piece, window.sequence});
  const char* const kNames[] = {"x", "y"};
  for (int index = 0; index < num_outputs; ++index) {
    const char* name = num_outputs == 1 && window.targets ? kNames[1] : kNames[index];
    const plan::TensorDesc& desc = init.outputs[index];
    if (desc.data_type() != plan::INT32 && desc.data_type() != plan::INT64) {
      return absl::InvalidArgumentError(absl::StrCat(op_type, ": output '", name,
                                                     "' must be int32 or int64, got ",
                                                     DataTypeName(desc.data_type())));
    }
    const Shape shape = Shape::FromProto(desc);
    if (shape != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_type, ": output '", name, "' is ", DescribeTensor(desc),
          " but must be [sample_count / micro_batches, sequence] = ", expected.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::cpu
