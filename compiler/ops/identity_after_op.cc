#include "compiler/ops/identity_after_op.h"

#include <vector>

#include "compiler/ops/signature_helpers.h"

namespace loom::compiler {
namespace {

class IdentityAfterOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, -1); !status.ok()) return status;
    return std::vector<TensorType>{context.inputs[0]};
  }

  // x's signatures only: the other inputs are ordering inputs.
  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    OpContext copied;
    copied.op_name = context.op_name;
    copied.inputs = {context.inputs[0]};
    copied.outputs = context.outputs;
    copied.attributes = context.attributes;
    std::vector<SbpSignature> signatures = ElementwiseSignatures(copied, degree);
    signatures.push_back(SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back(SbpSignature{{Sbp::PartialMax()}, {Sbp::PartialMax()}});
    return signatures;
  }

  int OrderingInputsFrom(const OpContext& context) const override { return 1; }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeIdentityAfterOp() { return std::make_unique<IdentityAfterOp>(); }

}  // namespace loom::compiler
