#ifndef LOOM_COMPILER_OPS_SIGNATURE_HELPERS_H_
#define LOOM_COMPILER_OPS_SIGNATURE_HELPERS_H_

// Helpers for the definitions of element-wise ops: ElementwiseSignatures, the split and broadcast
// signatures of an op whose output element i depends only on input element i, and
// BroadcastShapes, NumPy broadcasting of two shapes. The elementwise, cast, softmax, sleep and
// gradient ops of compiler/ops/ use them.

#include <cstdint>
#include <vector>

#include "compiler/op_definition.h"

namespace loom::compiler {

// Signatures of an op whose output element i depends only on input element i (after NumPy
// broadcasting): each output axis may be split when it has at least `parallel_degree` elements;
// an input splits along its aligned axis, or is broadcast where it has extent 1 or lacks the axis.
// Ends with all-broadcast. Partial signatures are the caller's to add.
std::vector<SbpSignature> ElementwiseSignatures(const OpContext& context, int64_t parallel_degree,
                                                const std::vector<int>& skip_output_axes = {});

// NumPy broadcasting of two shapes; error names both.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_SIGNATURE_HELPERS_H_
