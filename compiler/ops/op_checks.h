#ifndef LOOM_COMPILER_OPS_OP_CHECKS_H_
#define LOOM_COMPILER_OPS_OP_CHECKS_H_

// Helpers shared by the op definitions of compiler/ops/: checks of an op's attributes, input data
// types and ranks, with messages that name the input; axis normalisation; builders of kernel conf
// attributes (IntAttribute, EmptyKernelConf, ...); and LocalRange, the range of a tensor axis that
// a rank holds under an nd-SBP.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "core/balanced_split.h"

namespace loom::compiler {

// Checks and lowering helpers shared by the op definitions of compiler/ops/. Messages name the
// input ("input 'bias'") and say what was expected; the compiler adds the op.

// The op's attributes; an op built without an attribute map reads as having none.
OpAttributes AttributesOf(const OpContext& context);

// Every attribute of the op is one of `known`. Typos ("keepdims") would otherwise be ignored.
absl::Status CheckKnownAttributes(const OpContext& context,
                                  std::initializer_list<const char*> known);

// Input `index` (called `name` in messages) has one of the `allowed` data types.
absl::Status CheckInputDataType(const OpContext& context, int index, const std::string& name,
                                std::initializer_list<plan::DataType> allowed);

// Input `index` has rank >= `minimum_rank`.
absl::Status CheckInputMinimumRank(const OpContext& context, int index, const std::string& name,
                                   int minimum_rank);

// Normalises a list of axes against `rank` (negative counts from the end), rejecting out-of-range
// and repeated axes; the result is sorted.
absl::StatusOr<std::vector<int>> NormalizeAxes(const std::vector<int64_t>& axes, int rank,
                                               const std::string& what);

// "[0, 2, 1]".
std::string FormatList(const std::vector<int64_t>& values);

// Attribute values for kernel confs.
plan::AttributeValue IntAttribute(int64_t value);
plan::AttributeValue FloatAttribute(double value);
plan::AttributeValue IntListAttribute(const std::vector<int64_t>& values);

// A kernel conf for `op_type` with no attributes: lowering adds exactly the attributes the kernel
// reads, so a kernel never sees one it does not know.
plan::KernelConf EmptyKernelConf(const std::string& op_type);

// True when `sbp` splits tensor axis `axis` on some hierarchy axis.
bool SplitsAxis(const NdSbp& sbp, int axis);

// The range of tensor axis `axis` (logical extent `length`) that the rank at `coordinates` holds
// under `sbp` on `hierarchy`: hierarchy axes that split `axis` nest in order (the second splits
// the part the first gave). Unsplit axes give [0, length).
AxisRange LocalRange(const NdSbp& sbp, int axis, int64_t length,
                     const std::vector<int64_t>& coordinates,
                     const std::vector<int64_t>& hierarchy);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_OP_CHECKS_H_
