#ifndef LOOM_COMPILER_OPS_EMBEDDING_OP_H_
#define LOOM_COMPILER_OPS_EMBEDDING_OP_H_

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// out[s..., :] = table[ids[s...], :]. Inputs: table float32 [V, D], ids int32 or int64 [S...];
// output float32 [S..., D]. Splits:
//  (B, S(i)) -> S(i)      ids split (data parallel);
//  (S(1), B) -> S(last)   table split on the embedding dimension;
//  (S(0), B) -> P         vocab parallel (Megatron): each device looks up the ids of its rows and
//                         writes zeros for the others; lowering sets the kernel's "row_offset"
//                         (this device's first row) and "logical_rows" (V);
//  (B, B) -> B.
std::unique_ptr<OpDefinition> MakeEmbeddingOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_EMBEDDING_OP_H_
