#ifndef LOOM_COMPILER_OPS_CONCAT_OP_H_
#define LOOM_COMPILER_OPS_CONCAT_OP_H_

// The "concat" op (MakeConcatOp): inputs of one data type joined along one axis, split on any
// other axis. One of the op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc)
// puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// Joins one or more inputs of one data type along attribute "axis" (negative counts from the end);
// the inputs agree on every other axis. Splits: all inputs S(i) -> S(i) for i != axis; all P ->
// P; all B -> B.
std::unique_ptr<OpDefinition> MakeConcatOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_CONCAT_OP_H_
