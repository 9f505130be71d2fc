#include "compiler/boxing.h"

#include "absl/strings/str_cat.h"
#include "core/balanced_split.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

// The bytes of the tensor that a group along hierarchy axis `axis` works on: the logical tensor
// sliced by the splits of every other axis.
double GroupBytes(const TensorType& type, const Placement& placement, const NdSbp& sbp, int axis) {
  double elements = static_cast<double>(type.shape.NumElements());
  for (int h = 0; h < placement.num_axes(); ++h) {
    if (h != axis && sbp[h].is_split()) elements /= static_cast<double>(placement.hierarchy()[h]);
  }
  return elements * static_cast<double>(DataTypeSize(type.data_type));
}

// Whether an axis deeper than `axis` splits tensor axis `tensor_axis`: then a collective along
// `axis` on that tensor axis would see non-contiguous pieces.
bool InnerSplits(const NdSbp& sbp, int axis, int tensor_axis) {
  for (size_t h = axis + 1; h < sbp.size(); ++h) {
    if (sbp[h].is_split() && sbp[h].axis == tensor_axis) return true;
  }
  return false;
}

// The one-axis conversion from -> to along hierarchy axis h; false when no single step does it.
bool DirectStep(const TensorType& type, const Placement& placement, const NdSbp& from,
                const NdSbp& to, int h, BoxingStep* step) {
  const Sbp& a = from[h];
  const Sbp& b = to[h];
  const double n = static_cast<double>(placement.hierarchy()[h]);
  const double group_bytes = GroupBytes(type, placement, from, h);
  step->hierarchy_axis = h;
  step->from = from;
  step->to = to;
  step->reduce_max = a.kind == Sbp::Kind::kPartialMax;
  if (a.is_split() && InnerSplits(from, h, a.axis)) return false;
  if (b.is_split() && InnerSplits(to, h, b.axis)) return false;
  if (a.is_split() && b.is_broadcast()) {
    step->kind = BoxingStep::Kind::kAllGather;
    step->axis = a.axis;
    step->bytes = group_bytes * (n - 1) / n;  // each rank receives the others' slices
    return true;
  }
  if (a.is_partial() && b.is_broadcast()) {
    step->kind = BoxingStep::Kind::kAllReduce;
    step->bytes = 2 * group_bytes * (n - 1) / n;
    return true;
  }
  if (a.kind == Sbp::Kind::kPartialSum && b.is_split()) {
    step->kind = BoxingStep::Kind::kReduceScatter;
    step->axis = b.axis;
    step->bytes = group_bytes * (n - 1) / n;
    return true;
  }
  if (a.is_split() && b.is_split()) {
    step->kind = BoxingStep::Kind::kAllToAll;
    step->axis = b.axis;
    step->concat_axis = a.axis;
    step->bytes = group_bytes * (n - 1) / (n * n);  // each rank sends all but 1/n of its slice
    return true;
  }
  if (a.is_broadcast() && b.is_split()) {
    step->kind = BoxingStep::Kind::kLocalSlice;
    step->axis = b.axis;
    return true;
  }
  if (a.is_split() && b.kind == Sbp::Kind::kPartialSum) {
    step->kind = BoxingStep::Kind::kLocalPad;
    step->axis = a.axis;
    return true;
  }
  if (a.is_broadcast() && b.kind == Sbp::Kind::kPartialSum) {
    step->kind = BoxingStep::Kind::kZeroFill;
    return true;
  }
  return false;
}

// Steps converting `from` into `to` on one placement.
absl::StatusOr<std::vector<BoxingStep>> PlanSamePlacement(const TensorType& type,
                                                          const Placement& placement,
                                                          const NdSbp& from, const NdSbp& to) {
  std::vector<BoxingStep> steps;
  std::vector<int> differing;
  for (int h = 0; h < placement.num_axes(); ++h) {
    // On an axis of one device, S, B and P all hold the whole tensor: nothing to convert.
    if (from[h] != to[h] && placement.hierarchy()[h] > 1) differing.push_back(h);
  }
  if (differing.empty()) return steps;
  if (differing.size() == 1) {
    BoxingStep step;
    if (DirectStep(type, placement, from, to, differing[0], &step)) {
      steps.push_back(step);
      return steps;
    }
  }
  // General path: gather or reduce every differing axis to B, innermost first, then split or
  // zero-fill outermost first. Always valid, not always the cheapest.
  NdSbp current = from;
  for (int index = static_cast<int>(differing.size()) - 1; index >= 0; --index) {
    int h = differing[index];
    if (current[h].is_broadcast()) continue;
    NdSbp next = current;
    next[h] = Sbp::Broadcast();
    BoxingStep step;
    if (!DirectStep(type, placement, current, next, h, &step)) {
      return absl::InvalidArgumentError(
          absl::StrCat("no boxing from ", NdSbpToString(from), " to ", NdSbpToString(to)));
    }
    steps.push_back(step);
    current = next;
  }
  for (int h : differing) {
    if (to[h].is_broadcast()) continue;
    NdSbp next = current;
    next[h] = to[h];
    BoxingStep step;
    if (!DirectStep(type, placement, current, next, h, &step)) {
      return absl::InvalidArgumentError(
          absl::StrCat("no boxing from ", NdSbpToString(from), " to ", NdSbpToString(to)));
    }
    steps.push_back(step);
    current = next;
  }
  return steps;
}

NdSbp AllBroadcast(int axes) { return NdSbp(axes, Sbp::Broadcast()); }

}  // namespace

LocalWindow LocalWindowOf(const Shape& logical, const Placement& placement, const NdSbp& sbp,
                          int rank) {
  LocalWindow window;
  window.begin.assign(logical.rank(), 0);
  window.shape = logical;
  std::vector<int64_t> coordinates = placement.Coordinates(rank);
  for (int h = 0; h < placement.num_axes(); ++h) {
    if (!sbp[h].is_split()) continue;
    int axis = sbp[h].axis;
    AxisRange range =
        BalancedRange(window.shape.dimension(axis), placement.hierarchy()[h], coordinates[h]);
    window.begin[axis] += range.begin;
    window.shape.set_dimension(axis, range.size());
  }
  return window;
}

std::string BoxingStep::ToString() const {
  std::string what;
  switch (kind) {
    case Kind::kAllGather:
      what = absl::StrCat("all-gather(axis ", axis, ")");
      break;
    case Kind::kAllReduce:
      what = reduce_max ? "all-reduce(max)" : "all-reduce(sum)";
      break;
    case Kind::kReduceScatter:
      what = absl::StrCat("reduce-scatter(axis ", axis, ")");
      break;
    case Kind::kAllToAll:
      what = absl::StrCat("all-to-all(split axis ", axis, ", concat axis ", concat_axis, ")");
      break;
    case Kind::kLocalSlice:
      what = absl::StrCat("local slice(axis ", axis, ")");
      break;
    case Kind::kLocalPad:
      what = absl::StrCat("local pad into zeros(axis ", axis, ")");
      break;
    case Kind::kZeroFill:
      what = "local zero-fill";
      break;
    case Kind::kCopy:
      what = "copy";
      break;
  }
  return absl::StrCat(what, " ", NdSbpToString(from), " -> ", NdSbpToString(to),
                      from.size() > 1 ? absl::StrCat(" on hierarchy axis ", hierarchy_axis) : "");
}

absl::StatusOr<BoxingPlan> PlanBoxing(const TensorType& type, const Placement& from_placement,
                                      const NdSbp& from, const Placement& to_placement,
                                      const NdSbp& to) {
  BoxingPlan plan;
  if (from_placement == to_placement) {
    absl::StatusOr<std::vector<BoxingStep>> steps =
        PlanSamePlacement(type, from_placement, from, to);
    if (!steps.ok()) return steps.status();
    plan.source_steps = std::move(*steps);
  } else {
    plan.crosses_placements = true;
    const double tensor_bytes = static_cast<double>(type.shape.NumElements()) *
                                static_cast<double>(DataTypeSize(type.data_type));
    if (from_placement.hierarchy() == to_placement.hierarchy() && from == to) {
      plan.one_to_one = true;
      double local = tensor_bytes;
      for (int h = 0; h < from_placement.num_axes(); ++h) {
        if (from[h].is_split()) local /= static_cast<double>(from_placement.hierarchy()[h]);
      }
      plan.bytes += local;
    } else {
      absl::StatusOr<std::vector<BoxingStep>> before =
          PlanSamePlacement(type, from_placement, from, AllBroadcast(from_placement.num_axes()));
      if (!before.ok()) return before.status();
      absl::StatusOr<std::vector<BoxingStep>> after =
          PlanSamePlacement(type, to_placement, AllBroadcast(to_placement.num_axes()), to);
      if (!after.ok()) return after.status();
      plan.source_steps = std::move(*before);
      plan.destination_steps = std::move(*after);
      plan.bytes += tensor_bytes;
    }
  }
  for (const std::vector<BoxingStep>* steps : {&plan.source_steps, &plan.destination_steps}) {
    for (const BoxingStep& step : *steps) {
      plan.bytes += step.bytes;
      // Collectives reduce float32 only (summing bfloat16 parts would round at every hop).
      const bool reduces = step.kind == BoxingStep::Kind::kAllReduce ||
                           step.kind == BoxingStep::Kind::kReduceScatter;
      if (reduces && type.data_type != plan::FLOAT32) {
        return absl::InvalidArgumentError(
            absl::StrCat("no boxing from ", NdSbpToString(from), " to ", NdSbpToString(to), " of ",
                         type.ToString(), ": partial sums are reduced in float32 only"));
      }
    }
  }
  return plan;
}

double BoxingCost(const TensorType& type, const Placement& from_placement, const NdSbp& from,
                  const Placement& to_placement, const NdSbp& to) {
  if (from == to && from_placement == to_placement) return 0.0;
  absl::StatusOr<BoxingPlan> plan = PlanBoxing(type, from_placement, from, to_placement, to);
  if (!plan.ok()) return 1e30;
  return plan->bytes;
}

}  // namespace loom::compiler
