#ifndef LOOM_COMPILER_OPS_SLICE_OP_H_
#define LOOM_COMPILER_OPS_SLICE_OP_H_

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
