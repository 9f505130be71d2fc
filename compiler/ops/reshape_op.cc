#include "compiler/ops/reshape_op.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"
#include "core/checked_arithmetic.h"

namespace loom::compiler {
namespace {

class ReshapeOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"shape"}); !status.ok()) {
      return status;
    }
    absl::StatusOr<std::vector<int64_t>> requested = AttributesOf(context).GetIntList("shape");
    if (!requested.ok()) return requested.status();
    const Shape& input = context.inputs[0].shape;
    const int64_t elements = input.NumElements();
    int inferred_axis = -1;
    int64_t known_elements = 1;
    for (int axis = 0; axis < static_cast<int>(requested->size()); ++axis) {
      const int64_t extent = (*requested)[axis];
      if (extent == -1) {
        if (inferred_axis >= 0) {
          return OpError(absl::StrCat("shape ", FormatList(*requested),
                                      " has more than one -1 (at most one extent is inferred)"));
        }
        inferred_axis = axis;
      } else if (extent < 0) {
        return OpError(absl::StrCat("shape ", FormatList(*requested), " has extent ", extent,
                                    " (extents are >= 0, or -1 for one inferred extent)"));
      } else {
        // Checked: a product that wraps could equal the input's count (finding of issue 56).
        std::optional<int64_t> product = CheckedMultiply(known_elements, extent);
        if (!product.has_value() || *product > kMaxTensorElements) {
          return OpError(absl::StrCat("shape ", FormatList(*requested), " has more than 2^48 (",
                                      kMaxTensorElements,
                                      ") elements, the most a tensor may have"));
        }
        known_elements = *product;
      }
    }
    std::vector<int64_t> dimensions = *requested;
    if (inferred_axis >= 0) {
      if (known_elements == 0 || elements % known_elements != 0) {
        return OpError(absl::StrCat("cannot reshape ", input.ToString(), " (", elements,
                                    " elements) into ", FormatList(*requested),
                                    ": no extent for -1 gives ", elements, " elements"));
      }
      dimensions[inferred_axis] = elements / known_elements;
    } else if (known_elements != elements) {
      return OpError(absl::StrCat("cannot reshape ", input.ToString(), " (", elements,
                                  " elements) into ", FormatList(*requested), " (", known_elements,
                                  " elements)"));
    }
    return std::vector<TensorType>{TensorType{Shape(dimensions), context.inputs[0].data_type}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& input = context.inputs[0].shape;
    const Shape& output = context.outputs[0].shape;
    std::vector<SbpSignature> signatures;
    int64_t input_prefix = 1;  // elements of input axes [0, i)
    for (int i = 0; i < input.rank(); ++i) {
      int64_t output_prefix = 1;  // elements of output axes [0, j)
      for (int j = 0; j < output.rank() && output_prefix <= input_prefix; ++j) {
        if (output_prefix == input_prefix && input.dimension(i) % degree == 0 &&
            output.dimension(j) % degree == 0 && input.dimension(i) >= degree &&
            output.dimension(j) >= degree) {
          signatures.push_back({{Sbp::Split(i)}, {Sbp::Split(j)}});
        }
        output_prefix *= output.dimension(j);
        if (output_prefix == 0) break;
      }
      input_prefix *= input.dimension(i);
      if (input_prefix == 0) break;
    }
    signatures.push_back({{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back({{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return EmptyKernelConf(op_type);
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeReshapeOp() { return std::make_unique<ReshapeOp>(); }

}  // namespace loom::compiler
