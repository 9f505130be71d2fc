#ifndef LOOM_COMPILER_OPS_MATMUL_OP_H_
#define LOOM_COMPILER_OPS_MATMUL_OP_H_

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// c = op(a) @ op(b), attributes transpose_a / transpose_b. a is [..., m, k] ([..., k, m]
// transposed); b is [k, n] or batched like a. Splits: batch axes, m (S of a -> S of c), n (S of b
// -> S of c), and k (both split on k -> partial sum).
std::unique_ptr<OpDefinition> MakeMatmulOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_MATMUL_OP_H_
