#include "kernels/cpu/cross_entropy_kernel.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cross_entropy_rows.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "sparse_cross_entropy";

template <typename Label>
class SparseCrossEntropyKernel : public Kernel {
 public:
  SparseCrossEntropyKernel(const KernelInit& init, int64_t classes, int64_t ignore_index)
      : signature_(init), classes_(classes), ignore_index_(ignore_index) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const float* logits = context.inputs[0].Data<const float>();
    const TensorView& labels_view = context.inputs[1];
    const Label* labels = labels_view.Data<const Label>();
    float* loss = context.outputs[0].Data<float>();
    const int64_t samples = labels_view.NumElements();
    const int64_t classes = classes_;
    for (int64_t sample = 0; sample < samples; ++sample) {
      const int64_t label = static_cast<int64_t>(labels[sample]);
      if (label == ignore_index_) {
        loss[sample] = 0.0f;
        continue;
      }
      status = CheckSparseLabel(kOpType, label, classes, ignore_index_, labels_view.shape, sample);
      if (!status.ok()) return status;
      const float* row = logits + sample * classes;
      const ShiftedExponentialSum sum = ComputeShiftedExponentialSum(row, classes, nullptr);
      loss[sample] =
          static_cast<float>((static_cast<double>(sum.maximum) - row[label]) + std::log(sum.sum));
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t classes_;
  int64_t ignore_index_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSparseCrossEntropyKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "input 'logits'", init.inputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  status = CheckIndexDataType(kOpType, "input 'labels'", init.inputs[1]);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "output", init.outputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  const Shape logits = Shape::FromProto(init.inputs[0]);
  absl::StatusOr<Shape> samples = SampleShapeOfLogits(kOpType, logits);
  if (!samples.ok()) return samples.status();
  status = CheckSameShape(kOpType, "logits without its last axis", *samples, "labels",
                          Shape::FromProto(init.inputs[1]));
  if (!status.ok()) return status;
  status = CheckSameShape(kOpType, "labels", *samples, "output", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  absl::StatusOr<int64_t> ignore_index = Attributes(*init.conf).GetInt("ignore_index", -100);
  if (!ignore_index.ok()) return WithOpType(kOpType, ignore_index.status());
  const int64_t classes = logits.dimension(logits.rank() - 1);
  if (init.inputs[1].data_type() == plan::INT32) {
    return std::make_unique<SparseCrossEntropyKernel<int32_t>>(init, classes, *ignore_index);
  }
  return std::make_unique<SparseCrossEntropyKernel<int64_t>>(init, classes, *ignore_index);
}

}  // namespace loom::cpu
