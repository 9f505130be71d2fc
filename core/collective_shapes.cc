#include "core/collective_shapes.h"

#include "absl/strings/str_cat.h"
#include "core/balanced_split.h"

namespace loom {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

bool AxisInRange(int axis, const Shape& shape) { return axis >= 0 && axis < shape.rank(); }

// Whether `a` and `b` have the same rank and agree on every axis but `skip_a` and `skip_b`.
bool AgreeOutside(const Shape& a, const Shape& b, int skip_a, int skip_b) {
  if (a.rank() != b.rank()) return false;
  for (int axis = 0; axis < a.rank(); ++axis) {
    if (axis == skip_a || axis == skip_b) continue;
    if (a.dimension(axis) != b.dimension(axis)) return false;
  }
  return true;
}

absl::Status CheckAxis(const plan::CollectiveConf& conf, const char* field, int axis,
                       const Shape& shape) {
  if (AxisInRange(axis, shape)) return absl::OkStatus();
  return Invalid(absl::StrCat(CollectiveKindName(conf.kind()), " ", field, " ", axis,
                              " is out of range for ", shape.ToString()));
}

}  // namespace

std::string CollectiveKindName(plan::CollectiveKind kind) {
  switch (kind) {
    case plan::ALL_REDUCE:
      return "all-reduce";
    case plan::ALL_GATHER:
      return "all-gather";
    case plan::REDUCE_SCATTER:
      return "reduce-scatter";
    case plan::ALL_TO_ALL:
      return "all-to-all";
    default:
      return "unspecified collective";
  }
}

std::string DescribeCollective(const plan::CollectiveConf& conf) {
  if (conf.name().empty()) return absl::StrCat("sequence ", conf.sequence());
  return absl::StrCat("'", conf.name(), "' (sequence ", conf.sequence(), ")");
}

bool IsReduction(plan::CollectiveKind kind) {
  return kind == plan::ALL_REDUCE || kind == plan::REDUCE_SCATTER;
}

absl::StatusOr<Shape> CollectiveOutputShape(const plan::CollectiveConf& conf,
                                            absl::Span<const Shape> inputs, int rank) {
  const int size = static_cast<int>(inputs.size());
  if (size == 0 || rank < 0 || rank >= size) {
    return Invalid(absl::StrCat("rank ", rank, " is outside a communicator of ", size, " ranks"));
  }
  const std::string kind = CollectiveKindName(conf.kind());
  const int axis = conf.axis();
  switch (conf.kind()) {
    case plan::ALL_REDUCE:
    case plan::REDUCE_SCATTER: {
      for (int other = 1; other < size; ++other) {
        if (inputs[other] != inputs[0]) {
          return Invalid(absl::StrCat(kind, ": rank ", other, "'s input ", inputs[other].ToString(),
                                      " differs from rank 0's input ", inputs[0].ToString(),
                                      " (every rank reduces the same shape)"));
        }
      }
      Shape output = inputs[0];
      if (conf.kind() == plan::REDUCE_SCATTER) {
        if (absl::Status status = CheckAxis(conf, "axis", axis, output); !status.ok()) {
          return status;
        }
        output.set_dimension(axis, BalancedRange(output.dimension(axis), size, rank).size());
      }
      return output;
    }
    case plan::ALL_GATHER: {
      if (absl::Status status = CheckAxis(conf, "axis", axis, inputs[0]); !status.ok()) {
        return status;
      }
      Shape output = inputs[0];
      int64_t total = 0;
      for (int source = 0; source < size; ++source) {
        if (!AgreeOutside(inputs[source], inputs[0], axis, axis)) {
          return Invalid(absl::StrCat(kind, " along axis ", axis, ": rank ", source, "'s input ",
                                      inputs[source].ToString(), " does not match rank 0's input ",
                                      inputs[0].ToString(), " outside axis ", axis));
        }
        total += inputs[source].dimension(axis);
      }
      output.set_dimension(axis, total);
      return output;
    }
    case plan::ALL_TO_ALL: {
      const int concat_axis = conf.concat_axis();
      if (absl::Status status = CheckAxis(conf, "axis", axis, inputs[0]); !status.ok()) {
        return status;
      }
      if (absl::Status status = CheckAxis(conf, "concat_axis", concat_axis, inputs[0]);
          !status.ok()) {
        return status;
      }
      // The slice each source sends to `rank`.
      auto slice_from = [&](int source) {
        Shape slice = inputs[source];
        slice.set_dimension(axis, BalancedRange(slice.dimension(axis), size, rank).size());
        return slice;
      };
      Shape output = slice_from(0);
      int64_t total = 0;
      for (int source = 0; source < size; ++source) {
        Shape slice = slice_from(source);
        if (!AgreeOutside(slice, output, concat_axis, concat_axis)) {
          return Invalid(absl::StrCat(kind, " (split axis ", axis, ", concat axis ", concat_axis,
                                      "): the slice rank ", source, " sends to rank ", rank, ", ",
                                      slice.ToString(), ", does not match the one rank 0 sends, ",
                                      output.ToString(), ", outside the concat axis"));
        }
        total += slice.dimension(concat_axis);
      }
      output.set_dimension(concat_axis, total);
      return output;
    }
    default:
      return Invalid("the collective has no kind");
  }
}

absl::Status CheckCollectiveRankShapes(const plan::CollectiveConf& conf, int size, int rank,
                                       const Shape& input, const Shape& output) {
  const std::string kind = CollectiveKindName(conf.kind());
  const int axis = conf.axis();
  auto mismatch = [&](const std::string& why) {
    return Invalid(absl::StrCat(kind, " on rank ", rank, " of ", size, ": input ", input.ToString(),
                                " and output ", output.ToString(), " ", why));
  };
  if (input.rank() != output.rank()) return mismatch("have different ranks");
  switch (conf.kind()) {
    case plan::ALL_REDUCE:
      if (input != output) return mismatch("differ (an all-reduce keeps the shape)");
      return absl::OkStatus();
    case plan::ALL_GATHER:
      if (absl::Status status = CheckAxis(conf, "axis", axis, input); !status.ok()) return status;
      if (!AgreeOutside(input, output, axis, axis) ||
          output.dimension(axis) < input.dimension(axis)) {
        return mismatch(absl::StrCat("do not fit a gather along axis ", axis));
      }
      return absl::OkStatus();
    case plan::REDUCE_SCATTER: {
      if (absl::Status status = CheckAxis(conf, "axis", axis, input); !status.ok()) return status;
      const int64_t expected = BalancedRange(input.dimension(axis), size, rank).size();
      if (!AgreeOutside(input, output, axis, axis) || output.dimension(axis) != expected) {
        return mismatch(absl::StrCat("do not fit: rank ", rank, " keeps ", expected, " of the ",
                                     input.dimension(axis), " entries along axis ", axis));
      }
      return absl::OkStatus();
    }
    case plan::ALL_TO_ALL: {
      const int concat_axis = conf.concat_axis();
      if (absl::Status status = CheckAxis(conf, "axis", axis, input); !status.ok()) return status;
      if (absl::Status status = CheckAxis(conf, "concat_axis", concat_axis, input); !status.ok()) {
        return status;
      }
      if (!AgreeOutside(input, output, axis, concat_axis)) {
        return mismatch(absl::StrCat("differ outside the split axis ", axis,
                                     " and the concat axis ", concat_axis));
      }
      if (axis != concat_axis) {
        const int64_t expected = BalancedRange(input.dimension(axis), size, rank).size();
        if (output.dimension(axis) != expected) {
          return mismatch(absl::StrCat("do not fit: rank ", rank, " receives ", expected,
                                       " of the ", input.dimension(axis),
                                       " entries along the split axis ", axis));
        }
      }
      return absl::OkStatus();
    }
    default:
      return Invalid("the collective has no kind");
  }
}

}  // namespace loom
