#ifndef LOOM_COMPILER_OPS_EMBEDDING_OP_H_
#define LOOM_COMPILER_OPS_EMBEDDING_OP_H_

// The "embedding" op (MakeEmbeddingOp): rows of a float32 table looked up by integer ids, split by
// the ids (data parallel), by the embedding dimension, or by the table's rows (vocab parallel).
// One of the op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the
// op table. Also LowerEmbeddingTable, the kernel conf with the device's row offset, which
// "embedding_grad" lowers with too.

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

// The kernel conf of "embedding" and "embedding_grad": "row_offset" = this device's first row of
// the logical table of `rows` rows under `table_sbp`, and "logical_rows" = `rows`. `local_table`
// (may be null) is checked against the balanced split.
absl::StatusOr<plan::KernelConf> LowerEmbeddingTable(const std::string& op_type, int64_t rows,
                                                     const NdSbp& table_sbp,
                                                     const TensorType* local_table,
                                                     const LoweringContext& context);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_EMBEDDING_OP_H_
