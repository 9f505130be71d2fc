#ifndef LOOM_COMPILER_OPS_TRANSPOSE_OP_H_
#define LOOM_COMPILER_OPS_TRANSPOSE_OP_H_

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// out axis k is input axis permutation[k] (attribute "permutation", a permutation of
// [0, rank)); any data type. Splits: S(i) -> S(k) where permutation[k] == i; P -> P; B -> B.
std::unique_ptr<OpDefinition> MakeTransposeOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_TRANSPOSE_OP_H_
