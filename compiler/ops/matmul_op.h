#ifndef LOOM_COMPILER_OPS_MATMUL_OP_H_
#define LOOM_COMPILER_OPS_MATMUL_OP_H_

// The "matmul" op (MakeMatmulOp): matrix products, batched and with optional transposes, split
// by batch, by rows of a, by columns of b, or on the inner dimension as a partial sum. One of the
// op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// c = op(a) @ op(b), attributes transpose_a / transpose_b. a is [..., m, k] ([..., k, m]
// transposed); b is [k, n] or batched like a. Splits: batch axes, m (S of a -> S of c), n (S of b
// -> S of c), and k (both split on k -> partial sum).
std::unique_ptr<OpDefinition> MakeMatmulOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_MATMUL_OP_H_
