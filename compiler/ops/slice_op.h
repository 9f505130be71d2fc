#ifndef LOOM_COMPILER_OPS_SLICE_OP_H_
#define LOOM_COMPILER_OPS_SLICE_OP_H_

// The "slice" op (MakeSliceOp): a box of a tensor on logical indices, split on the axes it keeps
// whole; its gradient is "pad" (compiler/ops/gradient_ops.h). One of the op definitions that
// RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// out = input[begin[0]:end[0], begin[1]:end[1], ...] on logical indices; attributes "begin" and
// "end" have one entry per axis with 0 <= begin <= end <= extent; any data type. Splits: S(i) only
// on an axis the slice keeps whole (lowering then rewrites that axis to the local [0, local
// extent)); P -> P (slicing is linear); B -> B.
std::unique_ptr<OpDefinition> MakeSliceOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_SLICE_OP_H_
