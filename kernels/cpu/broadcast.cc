#include "kernels/cpu/broadcast.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::cpu {
namespace {

// The dimension of `shape` aligned with output axis `axis` of an output of rank `rank`: 1 when
// `shape` has no such (leading) axis.
int64_t AlignedDimension(const Shape& shape, int rank, int axis) {
  const int shape_axis = axis - (rank - shape.rank());
  return shape_axis < 0 ? 1 : shape.dimension(shape_axis);
}

// Row-major element strides of `shape` aligned to an output of rank `rank`, with 0 where the
// dimension is 1 and the output's is not (the input is repeated along that axis).
std::vector<int64_t> AlignedStrides(const Shape& shape, const Shape& output) {
  const int rank = output.rank();
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (int axis = rank - 1; axis >= 0; --axis) {
    const int64_t dimension = AlignedDimension(shape, rank, axis);
    strides[axis] = (dimension == 1 && output.dimension(axis) != 1) ? 0 : stride;
    stride *= dimension;
  }
  return strides;
}

}  // namespace

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dimensions(rank);
  for (int axis = 0; axis < rank; ++axis) {
    const int64_t a_dimension = AlignedDimension(a, rank, axis);
    const int64_t b_dimension = AlignedDimension(b, rank, axis);
    if (a_dimension != b_dimension && a_dimension != 1 && b_dimension != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", a.ToString(), " and ", b.ToString(),
                                                     " do not broadcast (", a_dimension, " vs ",
                                                     b_dimension, ")"));
    }
    dimensions[axis] = a_dimension == 1 ? b_dimension : a_dimension;
  }
  return absl::StatusOr<Shape>(absl::in_place, absl::MakeConstSpan(dimensions));
}

BroadcastIteration BroadcastIteration::Plan(const Shape& a, const Shape& b, const Shape& output) {
  const std::vector<int64_t> a_strides = AlignedStrides(a, output);
  const std::vector<int64_t> b_strides = AlignedStrides(b, output);
  BroadcastIteration iteration;
  for (int axis = 0; axis < output.rank(); ++axis) {
    const int64_t dimension = output.dimension(axis);
    if (dimension == 1) continue;
    if (!iteration.dimensions.empty()) {
      // Merge into the previous (outer) axis when stepping the outer axis once is the same as
      // stepping this one `dimension` times, for both inputs.
      const bool a_merges = iteration.a_strides.back() == a_strides[axis] * dimension;
      const bool b_merges = iteration.b_strides.back() == b_strides[axis] * dimension;
      if (a_merges && b_merges) {
        iteration.dimensions.back() *= dimension;
        iteration.a_strides.back() = a_strides[axis];
        iteration.b_strides.back() = b_strides[axis];
        continue;
      }
    }
    iteration.dimensions.push_back(dimension);
    iteration.a_strides.push_back(a_strides[axis]);
    iteration.b_strides.push_back(b_strides[axis]);
  }
  if (iteration.dimensions.empty()) {
    iteration.dimensions.push_back(1);
    iteration.a_strides.push_back(0);
    iteration.b_strides.push_back(0);
  }
  return iteration;
}

}  // namespace loom::cpu
