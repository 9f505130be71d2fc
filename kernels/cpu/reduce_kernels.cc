#include "kernels/cpu/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kReduceSum[] = "reduce_sum";
constexpr char kReduceMean[] = "reduce_mean";

// How to walk the input of a reduction, planned once: axes of size 1 are dropped and neighbouring
// axes that are both reduced or both kept are merged. The input is read contiguously; each axis
// has an output stride (0 where it is reduced).
struct ReducePlan {
  absl::InlinedVector<int64_t, 6> dimensions;
  absl::InlinedVector<int64_t, 6> input_strides;
  absl::InlinedVector<int64_t, 6> output_strides;
  absl::InlinedVector<bool, 6> reduced;
};

ReducePlan MakePlan(const Shape& input, const std::vector<bool>& reduced_axes) {
  // Merged (dimension, reduced) runs, outermost first.
  ReducePlan plan;
  for (int axis = 0; axis < input.rank(); ++axis) {
    const int64_t dimension = input.dimension(axis);
    if (dimension == 1) continue;
    if (!plan.dimensions.empty() && plan.reduced.back() == reduced_axes[axis]) {
      plan.dimensions.back() *= dimension;
      continue;
    }
    plan.dimensions.push_back(dimension);
    plan.reduced.push_back(reduced_axes[axis]);
  }
  if (plan.dimensions.empty()) {
    plan.dimensions.push_back(1);
    plan.reduced.push_back(false);
  }
  const size_t rank = plan.dimensions.size();
  plan.input_strides.assign(rank, 1);
  plan.output_strides.assign(rank, 0);
  int64_t input_stride = 1;
  int64_t output_stride = 1;
  for (size_t axis = rank; axis-- > 0;) {
    plan.input_strides[axis] = input_stride;
    input_stride *= plan.dimensions[axis];
    if (!plan.reduced[axis]) {
      plan.output_strides[axis] = output_stride;
      output_stride *= plan.dimensions[axis];
    }
  }
  return plan;
}

// Adds the elements of `input` from axis `axis` inwards into `sums`.
void Accumulate(const ReducePlan& plan, size_t axis, const float* input, double* sums) {
  const int64_t dimension = plan.dimensions[axis];
  if (axis + 1 == plan.dimensions.size()) {
    if (plan.reduced[axis]) {
      double sum = 0.0;
      for (int64_t i = 0; i < dimension; ++i) sum += input[i];
      *sums += sum;
    } else {
      for (int64_t i = 0; i < dimension; ++i) sums[i] += input[i];
    }
    return;
  }
  const int64_t input_stride = plan.input_strides[axis];
  const int64_t output_stride = plan.output_strides[axis];
  for (int64_t i = 0; i < dimension; ++i) {
    Accumulate(plan, axis + 1, input + i * input_stride, sums + i * output_stride);
  }
}

class ReduceKernel : public Kernel {
 public:
  ReduceKernel(const KernelInit& init, const char* op_type, ReducePlan plan, double multiplier)
      : signature_(init),
        op_type_(op_type),
        plan_(std::move(plan)),
        multiplier_(multiplier),
        sums_(Shape::FromProto(init.outputs[0]).NumElements()) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(op_type_, context);
    if (!status.ok()) return status;
    std::fill(sums_.begin(), sums_.end(), 0.0);
    if (context.inputs[0].NumElements() > 0) {
      Accumulate(plan_, 0, context.inputs[0].Data<const float>(), sums_.data());
    }
    float* output = context.outputs[0].Data<float>();
    const double multiplier = multiplier_;
    for (size_t i = 0; i < sums_.size(); ++i) output[i] = static_cast<float>(sums_[i] * multiplier);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  const char* op_type_;
  ReducePlan plan_;
  // 1 for a sum, 1 / divisor for a mean.
  double multiplier_;
  // Scratch: one double accumulator per output element.
  std::vector<double> sums_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceKernel(const char* op_type,
                                                           const KernelInit& init, bool mean) {
  absl::Status status = CheckArity(op_type, init, 1, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(op_type, init);
  if (!status.ok()) return status;
  const Shape input = Shape::FromProto(init.inputs[0]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  const int rank = input.rank();
  Attributes attributes(*init.conf);

  std::vector<int64_t> axes;
  if (attributes.Has("axes")) {
    absl::StatusOr<std::vector<int64_t>> listed = attributes.GetIntList("axes");
    if (!listed.ok()) return WithOpType(op_type, listed.status());
    axes = *std::move(listed);
  }
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      return absl::InvalidArgumentError(absl::StrCat(op_type, ": attribute 'axes' [",
                                                     absl::StrJoin(axes, ", "), "] has axis ", axis,
                                                     " outside input ", input.ToString()));
    }
    const int64_t normalized = axis < 0 ? axis + rank : axis;
    if (reduced[normalized]) {
      return absl::InvalidArgumentError(absl::StrCat(op_type, ": attribute 'axes' [",
                                                     absl::StrJoin(axes, ", "), "] names axis ",
                                                     normalized, " twice"));
    }
    reduced[normalized] = true;
  }
  absl::StatusOr<bool> keep_dims = attributes.GetBool("keep_dims", false);
  if (!keep_dims.ok()) return WithOpType(op_type, keep_dims.status());

  std::vector<int64_t> expected_dimensions;
  int64_t reduced_count = 1;
  for (int axis = 0; axis < rank; ++axis) {
    if (reduced[axis]) {
      reduced_count *= input.dimension(axis);
      if (*keep_dims) expected_dimensions.push_back(1);
    } else {
      expected_dimensions.push_back(input.dimension(axis));
    }
  }
  const Shape expected(expected_dimensions);
  if (output != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": output has shape ", output.ToString(), " but reducing input ", input.ToString(),
        " over axes [", absl::StrJoin(axes, ", "), "]", axes.empty() ? " (all)" : "",
        " with keep_dims=", *keep_dims ? "true" : "false", " gives ", expected.ToString()));
  }

  double multiplier = 1.0;
  if (mean) {
    double divisor = static_cast<double>(reduced_count);
    if (attributes.Has("divisor")) {
      absl::StatusOr<double> given = attributes.GetFloat("divisor");
      if (!given.ok()) return WithOpType(op_type, given.status());
      if (!(std::isfinite(*given) && *given > 0.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_type, ": attribute 'divisor' must be finite and > 0, got ", *given));
      }
      divisor = *given;
    }
    // No element reduced (and no divisor): 0 / 0, NaN like any mean of nothing.
    multiplier = divisor > 0.0 ? 1.0 / divisor : std::nan("");
  } else if (attributes.Has("divisor")) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'divisor' applies to reduce_mean only"));
  }
  return std::make_unique<ReduceKernel>(init, op_type, MakePlan(input, reduced), multiplier);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumKernel(const KernelInit& init) {
  return CreateReduceKernel(kReduceSum, init, /*mean=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceMeanKernel(const KernelInit& init) {
  return CreateReduceKernel(kReduceMean, init, /*mean=*/true);
}

}  // namespace loom::cpu
