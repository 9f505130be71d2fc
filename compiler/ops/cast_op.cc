#include "compiler/ops/cast_op.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"
#include "compiler/ops/signature_helpers.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

bool Castable(plan::DataType data_type) {
  return data_type == plan::FLOAT32 || data_type == plan::BFLOAT16;
}

class CastOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"to"}); !status.ok()) return status;
    absl::StatusOr<std::string> name = context.attributes_reader().GetString("to");
    if (!name.ok()) return name.status();
    absl::StatusOr<plan::DataType> to = ParseDataType(*name);
    const TensorType& input = context.inputs[0];
    if (!to.ok() || !Castable(*to) || !Castable(input.data_type)) {
      return OpError(absl::StrCat("casts between float32 and bfloat16, not from ",
                                  DataTypeName(input.data_type), " to '", *name, "'"));
    }
    return std::vector<TensorType>{TensorType{input.shape, *to}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures = ElementwiseSignatures(context, degree);
    // Widening is exact, so the float32 parts sum to the float32 of their sum: partial sums stay
    // partial (and are reduced in float32, the precision reductions support). Narrowing rounds
    // each part, so its partial sums are reduced first.
    if (context.inputs[0].data_type == plan::BFLOAT16 &&
        context.outputs[0].data_type == plan::FLOAT32) {
      // Before the all-broadcast signature, which stays last.
      signatures.insert(signatures.end() - 1,
                        SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    }
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.outputs[0].shape.NumElements());
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeCastOp() { return std::make_unique<CastOp>(); }

}  // namespace loom::compiler
