#ifndef LOOM_COMPILER_OPS_IDENTITY_AFTER_OP_H_
#define LOOM_COMPILER_OPS_IDENTITY_AFTER_OP_H_

// The "identity_after" op (MakeIdentityAfterOp): a copy of its first input made once its second
// is ready, the gate recomputation (compiler/recomputation.h) puts before the copies of a
// block's ops so that they run when the backward reaches the block, not when their inputs exist.
// One of the op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the
// op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// "identity_after": (x, after, ...) -> x, any data types, at least one `after`. The output has
// x's type and SBP; the `after` inputs only order the act (OrderingInputsFrom 1: never boxed,
// their bytes are not read). No gradient: only the compiler emits it, into the backward.
std::unique_ptr<OpDefinition> MakeIdentityAfterOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_IDENTITY_AFTER_OP_H_
