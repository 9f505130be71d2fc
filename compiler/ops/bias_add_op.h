#ifndef LOOM_COMPILER_OPS_BIAS_ADD_OP_H_
#define LOOM_COMPILER_OPS_BIAS_ADD_OP_H_

// The "bias_add" op (MakeBiasAddOp): a float32 bias vector added along the last axis of x, split
// on x's leading axes or, with the bias split too, on its last axis. One of the op definitions
// that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// y = x + bias, x float32 [..., n], bias float32 [n]. Splits: x on any axis but the last with bias
// broadcast; x on the last axis with bias split on its axis 0 (tensor parallel). (P, P) -> P; a
// partial x with a broadcast bias is not valid (the bias would be added once per device).
std::unique_ptr<OpDefinition> MakeBiasAddOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_BIAS_ADD_OP_H_
