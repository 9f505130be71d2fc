#include "compiler/ops/softmax_ops.h"

#include "compiler/ops/op_checks.h"
#include "compiler/ops/signature_helpers.h"

namespace loom::compiler {
namespace {

class LastAxisSoftmaxOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 0, "x", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputMinimumRank(context, 0, "x", 1); !status.ok()) {
      return status;
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    return ElementwiseSignatures(context, degree,
                                 /*skip_output_axes=*/{context.outputs[0].shape.rank() - 1});
  }

  // max, subtract, exp, sum, divide (or log): about five operations per element.
  double Flops(const OpContext& context) const override {
    return 5.0 * static_cast<double>(context.outputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return EmptyKernelConf(op_type);
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeSoftmaxOp() { return std::make_unique<LastAxisSoftmaxOp>(); }

std::unique_ptr<OpDefinition> MakeLogSoftmaxOp() { return std::make_unique<LastAxisSoftmaxOp>(); }

}  // namespace loom::compiler
