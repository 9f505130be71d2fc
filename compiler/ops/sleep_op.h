#ifndef LOOM_COMPILER_OPS_SLEEP_OP_H_
#define LOOM_COMPILER_OPS_SLEEP_OP_H_

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
