#ifndef LOOM_COMPILER_BOXING_H_
#define LOOM_COMPILER_BOXING_H_

// Boxing: how a tensor gets from one (placement, nd-SBP) layout to another. LocalWindowOf gives
// the window of a logical tensor that one rank holds; PlanBoxing breaks a conversion into
// BoxingSteps (collectives along one hierarchy axis, local slices, pads and zero-fills, copies
// between placements); BoxingCost, the bytes it moves per rank, is what SBP inference ranks
// signatures by. The lowering turns the steps into tasks (compiler/boxing_lowering.cc).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/placement.h"
#include "compiler/sbp.h"

namespace loom::compiler {

// The window of a logical tensor that one rank holds under an nd-SBP: hierarchy axes apply in
// order, each splitting what the previous ones left (balanced, as core/balanced_split.h).
struct LocalWindow {
  std::vector<int64_t> begin;  // per tensor axis
  Shape shape;
};
LocalWindow LocalWindowOf(const Shape& logical, const Placement& placement, const NdSbp& sbp,
                          int rank);

// One conversion step of a boxing. Collectives run in groups along one hierarchy axis.
struct BoxingStep {
  enum class Kind {
    kAllGather,      // S(axis) -> B
    kAllReduce,      // P -> B
    kReduceScatter,  // P -> S(axis)
    kAllToAll,       // S(concat_axis) -> S(axis)
    kLocalSlice,     // B -> S(axis)
    kLocalPad,       // S(axis) -> P: the slice in zeros of the group's shape
    kZeroFill,       // B -> P: the first member keeps the value, the others hold zeros
    kCopy,           // between placements: to every destination rank from one source rank
  };
  Kind kind;
  int hierarchy_axis = 0;
  int axis = 0;
  int concat_axis = 0;
  bool reduce_max = false;
  NdSbp from;  // the SBP before the step (on its placement)
  NdSbp to;    // and after
  // Bytes each rank of a group moves (the collective's volume formula).
  double bytes = 0;

  std::string ToString() const;
  bool is_collective() const {
    return kind == Kind::kAllGather || kind == Kind::kAllReduce || kind == Kind::kReduceScatter ||
           kind == Kind::kAllToAll;
  }
};

// How a tensor gets from (placement, sbp) to what a consumer needs.
struct BoxingPlan {
  // Steps on the source placement, then (if the placements differ) copies, then steps on the
  // destination placement.
  std::vector<BoxingStep> source_steps;
  // Placements differ: one-to-one copies (same hierarchy and SBP), else copies of the whole
  // tensor from source rank 0 to every destination rank.
  bool crosses_placements = false;
  bool one_to_one = false;
  std::vector<BoxingStep> destination_steps;
  double bytes = 0;

  bool empty() const {
    return source_steps.empty() && !crosses_placements && destination_steps.empty();
  }
};

// Plans the conversion. Errors (INVALID_ARGUMENT) only for conversions no step supports.
absl::StatusOr<BoxingPlan> PlanBoxing(const TensorType& type, const Placement& from_placement,
                                      const NdSbp& from, const Placement& to_placement,
                                      const NdSbp& to);

// The bytes a conversion moves per rank; 0 when none is needed. Cheap: used to rank signatures.
double BoxingCost(const TensorType& type, const Placement& from_placement, const NdSbp& from,
                  const Placement& to_placement, const NdSbp& to);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_BOXING_H_
