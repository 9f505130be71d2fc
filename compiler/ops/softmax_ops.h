#ifndef LOOM_COMPILER_OPS_SOFTMAX_OPS_H_
#define LOOM_COMPILER_OPS_SOFTMAX_OPS_H_

// The "softmax" and "log_softmax" ops (MakeSoftmaxOp, MakeLogSoftmaxOp) over the last axis of a
// float32 tensor, split on any other axis. Among the op definitions that RegisterStandardOps
// (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// softmax and log_softmax over the last axis of a float32 tensor of rank >= 1. Splits: any axis
// but the last; no partial signature (both are nonlinear).
std::unique_ptr<OpDefinition> MakeSoftmaxOp();
std::unique_ptr<OpDefinition> MakeLogSoftmaxOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_SOFTMAX_OPS_H_
