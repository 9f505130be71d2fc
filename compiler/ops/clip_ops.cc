#include "compiler/ops/clip_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

const TensorType kScalar{Shape({1}), plan::FLOAT32};

absl::Status CheckFloat(const TensorType& type, const std::string& what) {
  if (type.data_type != plan::FLOAT32) {
    return OpError(absl::StrCat(what, " must be float32, not ", type.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckScalar(const TensorType& type, const std::string& what) {
  if (type.data_type != plan::FLOAT32 || type.shape.NumElements() != 1 || type.shape.rank() != 1) {
    return OpError(absl::StrCat(what, " must be float32[1], not ", type.ToString()));
  }
  return absl::OkStatus();
}

class SquaredNormOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckFloat(context.inputs[0], "the input"); !status.ok()) {
      return status;
    }
    return std::vector<TensorType>{kScalar};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& shape = context.inputs[0].shape;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      if (shape.dimension(axis) >= degree) {
        signatures.push_back(SbpSignature{{Sbp::Split(axis)}, {Sbp::PartialSum()}});
      }
    }
    signatures.push_back(SbpSignature{{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return 2.0 * static_cast<double>(context.inputs[0].shape.NumElements());
  }
};

class ClipCoefficientOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"max_norm"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckScalar(context.inputs[0], "the total"); !status.ok()) {
      return status;
    }
    absl::StatusOr<double> max_norm = context.attributes_reader().GetFloat("max_norm", 0.0);
    if (!max_norm.ok()) return max_norm.status();
    if (!(*max_norm > 0)) return OpError("attribute 'max_norm' must be positive");
    return std::vector<TensorType>{kScalar};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    return {SbpSignature{{Sbp::Broadcast()}, {Sbp::Broadcast()}}};
  }
};

class ScaleByOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckFloat(context.inputs[0], "x"); !status.ok()) return status;
    if (absl::Status status = CheckScalar(context.inputs[1], "the coefficient"); !status.ok()) {
      return status;
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& shape = context.inputs[0].shape;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      if (shape.dimension(axis) >= degree) {
        signatures.push_back(
            SbpSignature{{Sbp::Split(axis), Sbp::Broadcast()}, {Sbp::Split(axis)}});
      }
    }
    signatures.push_back(SbpSignature{{Sbp::PartialSum(), Sbp::Broadcast()}, {Sbp::PartialSum()}});
    signatures.push_back(SbpSignature{{Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.inputs[0].shape.NumElements());
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeSquaredNormOp() { return std::make_unique<SquaredNormOp>(); }
std::unique_ptr<OpDefinition> MakeClipCoefficientOp() {
  return std::make_unique<ClipCoefficientOp>();
}
std::unique_ptr<OpDefinition> MakeScaleByOp() { return std::make_unique<ScaleByOp>(); }

}  // namespace loom::compiler
