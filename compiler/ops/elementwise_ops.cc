#include "compiler/ops/elementwise_ops.h"

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
  explicit UnaryOp(bool linear) : linear_(linear) {}

  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
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
};

}  // namespace

std::unique_ptr<OpDefinition> MakeBinaryOp(const std::string& op_type) {
  return std::make_unique<BinaryOp>(op_type);
}

std::unique_ptr<OpDefinition> MakeUnaryOp(bool linear) { return std::make_unique<UnaryOp>(linear); }

}  // namespace loom::compiler
