#ifndef LOOM_COMPILER_OPS_CLIP_OPS_H_
#define LOOM_COMPILER_OPS_CLIP_OPS_H_

// The ops of gradient clipping by global L2 norm, "squared_norm", "clip_coefficient" and
// "scale_by" (MakeSquaredNormOp, MakeClipCoefficientOp, MakeScaleByOp), which AddGradientClipping
// (compiler/gradient_clipping.h) puts between the gradients and the optimizer. Among the op
// definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// The three steps of gradient clipping by global L2 norm (compiler/gradient_clipping.h adds them;
// the kernels are in kernels/cpu/optimizers/clip_grad_kernels.h):
//  - "squared_norm": x (float32, any shape) -> [1], the sum of x's squares. A split x gives a
//    partial sum (S -> P); a broadcast x a broadcast sum. A partial x is not allowed (the squares
//    of partial values do not add up): boxing makes it whole first.
//  - "clip_coefficient": total [1] -> [1], min(1, max_norm / (sqrt(total) + 1e-6)); attribute
//    "max_norm" (> 0). Broadcast only (nonlinear).
//  - "scale_by": x (float32), coefficient [1] -> x * coefficient: x's SBP, coefficient broadcast.
std::unique_ptr<OpDefinition> MakeSquaredNormOp();
std::unique_ptr<OpDefinition> MakeClipCoefficientOp();
std::unique_ptr<OpDefinition> MakeScaleByOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_CLIP_OPS_H_
