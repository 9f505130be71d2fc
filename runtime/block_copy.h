#ifndef LOOM_RUNTIME_BLOCK_COPY_H_
#define LOOM_RUNTIME_BLOCK_COPY_H_

// Strided copies of blocks between dense row-major tensors: ForEachBlockRun calls back once per
// contiguous run of a block (a template, for callers that copy or combine the runs their own way),
// CopyBlock copies a block's bytes, and AxisOrigin gives the origin of a slice along one axis. The
// CPU collective backends (shared memory, network) pack, place and reduce slices with them.

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "glog/logging.h"

namespace loom {

// Strided copies between dense row-major tensors, for collectives and boxing: a *block* is the
// sub-tensor of shape `block` whose first element sits at `origin` (one index per axis). A block
// along a non-leading axis is `outer` runs of `block[axis] x inner` contiguous elements; trailing
// axes that the block covers whole in both tensors merge into one run.

// The origin of a block that starts at `offset` along `axis` and at 0 elsewhere.
inline absl::InlinedVector<int64_t, 6> AxisOrigin(int rank, int axis, int64_t offset) {
  absl::InlinedVector<int64_t, 6> origin(rank, 0);
  if (rank > 0) origin[axis] = offset;
  return origin;
}

// Calls `run(source_offset, destination_offset, count)`, in elements, for each contiguous run of
// a block of shape `block` placed at `source_origin` in a tensor of `source_shape` and at
// `destination_origin` in a tensor of `destination_shape` (all of one rank; the caller guarantees
// that the block fits in both).
template <typename RunCallback>
void ForEachBlockRun(const Shape& block, const Shape& source_shape,
                     absl::Span<const int64_t> source_origin, const Shape& destination_shape,
                     absl::Span<const int64_t> destination_origin, RunCallback&& run) {
  const int rank = block.rank();
  DCHECK_EQ(source_shape.rank(), rank);
  DCHECK_EQ(destination_shape.rank(), rank);
  if (block.NumElements() == 0) return;
  if (rank == 0) {
    run(0, 0, 1);
    return;
  }
  // Trailing axes covered whole by the block in both tensors join the innermost run.
  int last = rank - 1;
  int64_t inner = 1;
  while (last > 0 && block.dimension(last) == source_shape.dimension(last) &&
         block.dimension(last) == destination_shape.dimension(last)) {
    inner *= block.dimension(last);
    --last;
  }
  const int64_t run_length = block.dimension(last) * inner;
  // Element strides of both tensors.
  absl::InlinedVector<int64_t, 6> source_stride(rank, 1);
  absl::InlinedVector<int64_t, 6> destination_stride(rank, 1);
  for (int axis = rank - 2; axis >= 0; --axis) {
    source_stride[axis] = source_stride[axis + 1] * source_shape.dimension(axis + 1);
    destination_stride[axis] = destination_stride[axis + 1] * destination_shape.dimension(axis + 1);
  }
  int64_t source_offset = 0;
  int64_t destination_offset = 0;
  for (int axis = 0; axis < rank; ++axis) {
    source_offset += source_origin[axis] * source_stride[axis];
    destination_offset += destination_origin[axis] * destination_stride[axis];
  }
  // An odometer over the axes before `last`.
  absl::InlinedVector<int64_t, 6> index(last, 0);
  while (true) {
    run(source_offset, destination_offset, run_length);
    int axis = last - 1;
    while (axis >= 0) {
      source_offset += source_stride[axis];
      destination_offset += destination_stride[axis];
      if (++index[axis] < block.dimension(axis)) break;
      source_offset -= source_stride[axis] * block.dimension(axis);
      destination_offset -= destination_stride[axis] * block.dimension(axis);
      index[axis] = 0;
      --axis;
    }
    if (axis < 0) return;
  }
}

// Copies the block of shape `block` at `source_origin` of `source` to `destination_origin` of
// `destination` (same data type; any data type: bytes are copied).
void CopyBlock(const TensorView& source, absl::Span<const int64_t> source_origin,
               const TensorView& destination, absl::Span<const int64_t> destination_origin,
               const Shape& block);

}  // namespace loom

#endif  // LOOM_RUNTIME_BLOCK_COPY_H_
