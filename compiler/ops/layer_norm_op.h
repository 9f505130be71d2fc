#ifndef LOOM_COMPILER_OPS_LAYER_NORM_OP_H_
#define LOOM_COMPILER_OPS_LAYER_NORM_OP_H_

// The "layer_norm" op (MakeLayerNormOp): normalisation of a float32 tensor over its last axis
// with a scale (gamma) and shift (beta), split on any other axis. One of the op definitions that
// RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// y = (x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis: x float32 [..., n],
// gamma and beta float32 [n]; attribute epsilon (default 1e-5, finite, >= 0). Splits: x on any axis
// but the last with gamma and beta broadcast.
std::unique_ptr<OpDefinition> MakeLayerNormOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_LAYER_NORM_OP_H_
