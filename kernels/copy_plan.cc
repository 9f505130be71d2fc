#include "kernels/copy_plan.h"

#include <algorithm>

namespace loom {

CopyPlan CopyPlan::Make(absl::Span<const int64_t> dimensions,
                        absl::Span<const int64_t> source_strides,
                        absl::Span<const int64_t> destination_strides, int64_t source_offset,
                        int64_t destination_offset) {
  CopyPlan plan;
  plan.count = 1;
  for (int64_t dimension : dimensions) plan.count *= dimension;
  if (plan.count == 0) return plan;
  plan.source_offset = source_offset;
  plan.destination_offset = destination_offset;
  for (size_t axis = 0; axis < dimensions.size(); ++axis) {
    const int64_t dimension = dimensions[axis];
    if (dimension == 1) continue;
    if (!plan.dimensions.empty() &&
        plan.source_strides.back() == source_strides[axis] * dimension &&
        plan.destination_strides.back() == destination_strides[axis] * dimension) {
      plan.dimensions.back() *= dimension;
      plan.source_strides.back() = source_strides[axis];
      plan.destination_strides.back() = destination_strides[axis];
      continue;
    }
    plan.dimensions.push_back(dimension);
    plan.source_strides.push_back(source_strides[axis]);
    plan.destination_strides.push_back(destination_strides[axis]);
  }
  if (plan.dimensions.empty()) {
    plan.dimensions.push_back(1);
    plan.source_strides.push_back(1);
    plan.destination_strides.push_back(1);
  }
  const size_t rank = plan.dimensions.size();
  if (rank >= 2 && plan.source_strides.back() != 1) {
    for (size_t axis = 0; axis + 1 < rank; ++axis) {
      if (plan.source_strides[axis] != 1) continue;
      // The loop order does not change what is copied where.
      for (auto* values : {&plan.dimensions, &plan.source_strides, &plan.destination_strides}) {
        std::rotate(values->begin() + axis, values->begin() + axis + 1, values->end() - 1);
      }
      plan.tiled = true;
      break;
    }
  }
  return plan;
}

}  // namespace loom
