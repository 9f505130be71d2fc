#include "compiler/ops/signature_helpers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace loom::compiler {

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dimensions(rank);
  for (int i = 0; i < rank; ++i) {
    int a_axis = i - (rank - a.rank());
    int b_axis = i - (rank - b.rank());
    int64_t a_extent = a_axis >= 0 ? a.dimension(a_axis) : 1;
    int64_t b_extent = b_axis >= 0 ? b.dimension(b_axis) : 1;
    if (a_extent != b_extent && a_extent != 1 && b_extent != 1) {
      return OpError(absl::StrCat("shapes ", a.ToString(), " and ", b.ToString(),
                                  " do not broadcast (axis ", i, ": ", a_extent, " vs ", b_extent,
                                  ")"));
    }
    dimensions[i] = std::max(a_extent, b_extent);
  }
  // Built in place: a Shape moved into the StatusOr trips GCC 12's -Wmaybe-uninitialized inside
  // absl::InlinedVector's move (a false positive).
  return absl::StatusOr<Shape>(absl::in_place, dimensions);
}

std::vector<SbpSignature> ElementwiseSignatures(const OpContext& context, int64_t parallel_degree,
                                                const std::vector<int>& skip_output_axes) {
  std::vector<SbpSignature> signatures;
  const Shape& out = context.outputs[0].shape;
  for (int axis = 0; axis < out.rank(); ++axis) {
    if (out.dimension(axis) < parallel_degree) continue;
    if (std::find(skip_output_axes.begin(), skip_output_axes.end(), axis) !=
        skip_output_axes.end()) {
      continue;
    }
    SbpSignature signature;
    for (const TensorType& input : context.inputs) {
      int aligned = axis - (out.rank() - input.shape.rank());
      if (aligned >= 0 && input.shape.dimension(aligned) == out.dimension(axis)) {
        signature.inputs.push_back(Sbp::Split(aligned));
      } else {
        signature.inputs.push_back(Sbp::Broadcast());
      }
    }
    for (size_t i = 0; i < context.outputs.size(); ++i) {
      signature.outputs.push_back(Sbp::Split(axis));
    }
    signatures.push_back(std::move(signature));
  }
  SbpSignature broadcast;
  broadcast.inputs.assign(context.inputs.size(), Sbp::Broadcast());
  broadcast.outputs.assign(context.outputs.size(), Sbp::Broadcast());
  signatures.push_back(std::move(broadcast));
  return signatures;
}

}  // namespace loom::compiler
