#ifndef LOOM_KERNELS_COPY_PLAN_H_
#define LOOM_KERNELS_COPY_PLAN_H_

// CopyPlan: a copy of a box of elements between two strided layouts, planned once with unit axes
// dropped, contiguous axes merged and transposes tiled. The CPU and CUDA layout kernels
// (transpose, slice, pad, concat) copy by it.

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace loom {

// A box of elements copied between two strided layouts (in elements), planned once: axes of size
// 1 are dropped and neighbouring axes that are contiguous in both layouts merged, so that the
// innermost loop is as long as possible (a plain memcpy when both layouts are contiguous there).
// When the innermost axis is strided in the source but another axis is contiguous there (a
// transpose), that axis is moved next to the innermost one and the two are copied in tiles, so
// that reads and writes both stay within a few cache lines (CPU) or are coalesced (GPU). Shared by
// the CPU and CUDA layout kernels.
struct CopyPlan {
  // Outermost first; never empty when there is something to copy.
  absl::InlinedVector<int64_t, 6> dimensions;
  // Element strides along each of `dimensions`.
  absl::InlinedVector<int64_t, 6> source_strides;
  absl::InlinedVector<int64_t, 6> destination_strides;
  // Where the box starts in the source and the destination, in elements.
  int64_t source_offset = 0;
  int64_t destination_offset = 0;
  // Elements in the box; 0 means nothing to copy.
  int64_t count = 0;
  // The last two axes are copied in tiles: the second-last is contiguous in the source.
  bool tiled = false;

  static CopyPlan Make(absl::Span<const int64_t> dimensions,
                       absl::Span<const int64_t> source_strides,
                       absl::Span<const int64_t> destination_strides, int64_t source_offset = 0,
                       int64_t destination_offset = 0);

  int rank() const { return static_cast<int>(dimensions.size()); }
};

}  // namespace loom

#endif  // LOOM_KERNELS_COPY_PLAN_H_
