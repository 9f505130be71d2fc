#ifndef LOOM_COMPILER_OPS_CAST_OP_H_
#define LOOM_COMPILER_OPS_CAST_OP_H_

// The "cast" op (MakeCastOp): a tensor converted between float32 and bfloat16, which mixed
// precision (compiler/mixed_precision.h) puts around matmuls and attention; its gradient is a
// cast back. One of the op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc)
// puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// "cast": its one input converted to the data type named by the string attribute `to`
// ("float32" or "bfloat16"), same shape: float32 to bfloat16 rounds to the nearest even, bfloat16
// to float32 is exact, a cast to the input's own type copies. The building block of mixed
// precision (bfloat16 compute, float32 master weights). Split and broadcast inputs pass through;
// a partial sum does not (rounding each part is not rounding the sum), so it is boxed first. The
// gradient is the output's gradient cast back to the input's type.
std::unique_ptr<OpDefinition> MakeCastOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_CAST_OP_H_
