#ifndef LOOM_COMPILER_OPS_RESHAPE_OP_H_
#define LOOM_COMPILER_OPS_RESHAPE_OP_H_

// The "reshape" op (MakeReshapeOp): a row-major reshape of any data type, split only where every
// device's slice is the same bytes under both shapes. One of the op definitions that
// RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// Row-major reshape of any data type; attribute "shape" (an integer list, one entry may be -1 and
// is then inferred). Splits: S(i) -> S(j) when the axes before i and before j hold as many
// elements and both in[i] and out[j] divide by the degree (then every device's slice is the same
// bytes under both shapes); P -> P; B -> B. The kernel copies bytes: its conf has no attributes.
std::unique_ptr<OpDefinition> MakeReshapeOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_RESHAPE_OP_H_
