#ifndef LOOM_CORE_COLLECTIVE_SHAPES_H_
#define LOOM_CORE_COLLECTIVE_SHAPES_H_

// The shape rules of the four collective kinds (all-reduce, all-gather, reduce-scatter,
// all-to-all): CollectiveOutputShape from every rank's input shape, CheckCollectiveRankShapes for
// what one rank can check alone, and how messages name them (CollectiveKindName,
// DescribeCollective). Plan validation, the collective actor and every collective backend use them.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom {

// What each collective kind computes, as shapes (plan.proto's CollectiveKind; slices follow
// BalancedRange of core/balanced_split.h). Plan validation and every backend use these, so that
// a plan that validates is a plan the backends run.

// "all-reduce", "all-gather", "reduce-scatter", "all-to-all".
std::string CollectiveKindName(plan::CollectiveKind kind);

// "'allreduce_a' (sequence 0)", or "sequence 0" for a collective without a name.
std::string DescribeCollective(const plan::CollectiveConf& conf);

// All-reduce and reduce-scatter reduce (float32 only); the others move bytes of any data type.
bool IsReduction(plan::CollectiveKind kind);

// The output shape of rank `rank`, given every rank's input shape in rank order:
//  - ALL_REDUCE: the common input shape;
//  - ALL_GATHER: the inputs concatenated along `axis` (they agree on every other axis);
//  - REDUCE_SCATTER: the common input shape, with `axis` cut to the rank's balanced slice;
//  - ALL_TO_ALL: the rank's balanced slice along `axis` of every input, concatenated along
//    `concat_axis` (the slices agree on every other axis).
// INVALID_ARGUMENT, naming the ranks, when the inputs do not fit together or an axis is out of
// range.
absl::StatusOr<Shape> CollectiveOutputShape(const plan::CollectiveConf& conf,
                                            absl::Span<const Shape> inputs, int rank);

// What one rank can check without its peers' shapes: the axes are in range, input and output have
// the same rank and agree outside `axis` (and `concat_axis`), an all-reduce keeps its shape, and a
// rank's slice along `axis` (reduce-scatter, all-to-all) has its balanced size.
absl::Status CheckCollectiveRankShapes(const plan::CollectiveConf& conf, int size, int rank,
                                       const Shape& input, const Shape& output);

}  // namespace loom

#endif  // LOOM_CORE_COLLECTIVE_SHAPES_H_
