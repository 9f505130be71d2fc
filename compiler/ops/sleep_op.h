#ifndef LOOM_COMPILER_OPS_SLEEP_OP_H_
#define LOOM_COMPILER_OPS_SLEEP_OP_H_

// The "sleep" op (MakeSleepOp): an identity that takes a set time, forward and backward, so that
// pipeline tests and benchmarks can build jobs of known cost. One of the op definitions that
// RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// "sleep": a synthetic op of a set cost, for pipeline tests and benchmarks. One float32 input;
// the output is the input, produced after "microseconds" (int >= 0) of sleep. Its gradient is
// the same op on the output gradient, taking "backward_microseconds" (default: microseconds).
// Any SBP passes through unchanged (it is the identity).
std::unique_ptr<OpDefinition> MakeSleepOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_SLEEP_OP_H_
