#ifndef LOOM_COMPILER_OPS_REDUCE_OPS_H_
#define LOOM_COMPILER_OPS_REDUCE_OPS_H_

// The reductions "reduce_sum" and "reduce_mean" (MakeReduceSumOp, MakeReduceMeanOp) of a float32
// tensor over some of its axes, split on a kept axis or, as a partial sum, on a reduced one. Among
// the op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// reduce_sum and reduce_mean of a float32 tensor over attribute "axes" (negative counts from the
// end, no repeats; missing or empty means every axis, like the kernels) with "keep_dims" (default
// false: reduced axes are removed; true: they stay with extent 1). Splits: S(i) on a kept axis ->
// S(i') (i' is the axis's index in the output); S(i) on a reduced axis -> P; P -> P; B -> B.
// Lowering passes normalised axes, and for reduce_mean sets the kernel's "divisor" to the LOGICAL
// number of reduced elements, so that the partial means of a split reduced axis sum to the logical
// mean.
std::unique_ptr<OpDefinition> MakeReduceSumOp();
std::unique_ptr<OpDefinition> MakeReduceMeanOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_REDUCE_OPS_H_
