#ifndef LOOM_COMPILER_OPS_TRANSPOSE_OP_H_
#define LOOM_COMPILER_OPS_TRANSPOSE_OP_H_

// The "transpose" op (MakeTransposeOp): a permutation of the axes of a tensor of any data type,
// whose splits follow the permuted axes. One of the op definitions that RegisterStandardOps
// (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// out axis k is input axis permutation[k] (attribute "permutation", a permutation of
// [0, rank)); any data type. Splits: S(i) -> S(k) where permutation[k] == i; P -> P; B -> B.
std::unique_ptr<OpDefinition> MakeTransposeOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_TRANSPOSE_OP_H_
