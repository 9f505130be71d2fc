#include "kernels/cpu/ones_like_kernel.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "ones_like";

class OnesLikeKernel : public Kernel {
 public:
  explicit OnesLikeKernel(const KernelInit& init) : signature_(init) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const TensorView& output = context.outputs[0];
    float* data = static_cast<float*>(output.data);
    std::fill(data, data + output.NumElements(), 1.0f);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateOnesLikeKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 1, 1);
  if (!status.ok()) return status;
  const plan::DataType data_type = init.inputs[0].data_type();
  if (DataTypeSize(data_type) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": input has no data type (", DataTypeName(data_type), ")"));
  }
  status = CheckDataType(kOpType, "output", init.outputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  status = CheckSameShape(kOpType, "input", Shape::FromProto(init.inputs[0]), "output",
                          Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return std::make_unique<OnesLikeKernel>(init);
}

}  // namespace loom::cpu
