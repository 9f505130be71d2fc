#include "compiler/ops/sleep_op.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"
#include "compiler/ops/signature_helpers.h"

namespace loom::compiler {
namespace {

class SleepOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status =
            CheckKnownAttributes(context, {"microseconds", "backward_microseconds"});
        !status.ok()) {
      return status;
    }
    if (context.inputs[0].data_type != plan::FLOAT32) {
      return OpError(absl::StrCat("the input must be float32, not ", context.inputs[0].ToString()));
    }
    const OpAttributes attributes = context.attributes_reader();
    for (const char* name : {"microseconds", "backward_microseconds"}) {
      absl::StatusOr<int64_t> value = attributes.GetInt(name, 0);
      if (!value.ok()) return value.status();
      if (*value < 0) return OpError(absl::StrCat("attribute '", name, "' must not be negative"));
    }
    if (!attributes.Has("microseconds")) return OpError("attribute 'microseconds' is required");
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures = ElementwiseSignatures(context, degree);
    signatures.insert(signatures.end() - 1, SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    plan::KernelConf conf;
    conf.set_op_type("sleep");
    absl::StatusOr<int64_t> microseconds = context.op->attributes_reader().GetInt("microseconds");
    if (!microseconds.ok()) return microseconds.status();
    (*conf.mutable_attributes())["microseconds"].set_int_value(*microseconds);
    return conf;
  }

  absl::StatusOr<std::vector<std::string>> Gradient(const GradientRequest& request,
                                                    GradientBuilder* builder) const override {
    const OpAttributes attributes = request.op->attributes_reader();
    absl::StatusOr<int64_t> forward = attributes.GetInt("microseconds");
    if (!forward.ok()) return forward.status();
    absl::StatusOr<int64_t> backward = attributes.GetInt("backward_microseconds", *forward);
    if (!backward.ok()) return backward.status();
    AttributeMap gradient_attributes;
    gradient_attributes["microseconds"].set_int_value(*backward);
    return std::vector<std::string>{
        builder->Emit("sleep", {request.output_gradients[0]}, std::move(gradient_attributes))[0]};
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeSleepOp() { return std::make_unique<SleepOp>(); }

}  // namespace loom::compiler
