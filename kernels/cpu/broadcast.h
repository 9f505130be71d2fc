#ifndef LOOM_KERNELS_CPU_BROADCAST_H_
#define LOOM_KERNELS_CPU_BROADCAST_H_

// NumPy broadcasting for the element-wise kernels: BroadcastShapes, the shape two shapes broadcast
// to, and BroadcastIteration, a walk over a broadcast output with merged axes and per-input
// strides, planned once. The CPU binary kernels walk it; the CUDA element-wise and gradient kernels
// build their index tables from it.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace loom::cpu {

// NumPy broadcasting of two shapes: trailing dimensions are aligned, and a dimension of 1 (or a
// missing leading one) stretches to the other. Fails when two aligned dimensions differ and
// neither is 1; the message names both shapes.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// How to walk the output of a broadcast binary op with two read positions, planned once. Output
// axes of size 1 are dropped and neighbouring axes that both inputs read contiguously (or both
// repeat) are merged, so that the innermost loop is as long as possible.
struct BroadcastIteration {
  // Output dimensions, outermost first; never empty (a single element gives {1}).
  std::vector<int64_t> dimensions;
  // Element strides of a and b along each of `dimensions`: 0 where that input is broadcast.
  std::vector<int64_t> a_strides;
  std::vector<int64_t> b_strides;

  // `output` must be BroadcastShapes(a, b).
  static BroadcastIteration Plan(const Shape& a, const Shape& b, const Shape& output);
};

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_BROADCAST_H_
