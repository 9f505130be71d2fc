#include "compiler/ops/elementwise_ops.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/ops/signature_helpers.h"

namespace loom::compiler {
namespace {

class BinaryOp final : public OpDefinition {
 public:
  explicit BinaryOp(std::string op_type) : op_type_(std::move(op_type)) {}

  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    for (const TensorType& input : context.inputs) {
      if (input.data_type != plan::FLOAT32) return OpError("needs float32 inputs");
    }
    absl::StatusOr<Shape> shape = BroadcastShapes(context.inputs[0].shape, context.inputs[1].shape);
    if (!shape.ok()) return shape.status();
    return std::vector<TensorType>{TensorType{*shape, plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures = ElementwiseSignatures(context, degree);
    const Sbp p = Sbp::PartialSum();
    const Sbp b = Sbp::Broadcast();
    if (op_type_ == "add" || op_type_ == "subtract") {
      signatures.insert(signatures.end() - 1, SbpSignature{{p, p}, {p}});
    } else if (op_type_ == "multiply") {
      signatures.insert(signatures.end() - 1, SbpSignature{{p, b}, {p}});
      signatures.insert(signatures.end() - 1, SbpSignature{{b, p}, {p}});
    } else if (op_type_ == "divide") {
      signatures.insert(signatures.end() - 1, SbpSignature{{p, b}, {p}});
    }
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.outputs[0].shape.NumElements());
  }

 private:
  std::string op_type_;
};

class UnaryOp final : public OpDefinition {
 public:
  // `factor_attribute`: the name of a float attribute the op needs, finite (scale's "scale"), or
  // nullptr.
  UnaryOp(bool linear, const char* factor_attribute)
      : linear_(linear), factor_attribute_(factor_attribute) {}

  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    // relu, gelu, tanh and scale compute on float32 (their kernels refuse anything else);
    // identity copies any type.
    if ((!linear_ || factor_attribute_ != nullptr) &&
        context.inputs[0].data_type != plan::FLOAT32) {
      return OpError(absl::StrCat("needs a float32 input, not ", context.inputs[0].ToString()));
    }
    if (factor_attribute_ != nullptr) {
      // What the kernel needs: refused here, naming the op, rather than when the job runs.
      if (context.attributes == nullptr || !context.attributes->contains(factor_attribute_)) {
        return OpError(absl::StrCat("attribute '", factor_attribute_, "' is required"));
      }
      absl::StatusOr<double> factor = context.attributes_reader().GetFloat(factor_attribute_, 0);
      if (!factor.ok()) return factor.status();
      if (!std::isfinite(*factor)) {
        return OpError(
            absl::StrCat("attribute '", factor_attribute_, "' must be finite, not ", *factor));
      }
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures = ElementwiseSignatures(context, degree);
    if (linear_) {
      signatures.insert(signatures.end() - 1,
                        SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    }
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.outputs[0].shape.NumElements());
  }

 private:
  bool linear_;
  const char* factor_attribute_;
};

}  // namespace

std::unique_ptr<OpDefinition> MakeBinaryOp(const std::string& op_type) {
  return std::make_unique<BinaryOp>(op_type);
}

std::unique_ptr<OpDefinition> MakeUnaryOp(bool linear) {
  return std::make_unique<UnaryOp>(linear, nullptr);
}

std::unique_ptr<OpDefinition> MakeScaleOp() {
  return std::make_unique<UnaryOp>(/*linear=*/true, "scale");
}

}  // namespace loom::compiler
