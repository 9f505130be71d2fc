#ifndef LOOM_COMPILER_OPS_SPARSE_CROSS_ENTROPY_OP_H_
#define LOOM_COMPILER_OPS_SPARSE_CROSS_ENTROPY_OP_H_

// The "sparse_cross_entropy" op (MakeSparseCrossEntropyOp): the cross-entropy loss of float32
// logits against integer class labels, one loss per example, split on the batch axes. One of the
// op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// loss[n...] = -log_softmax(logits[n..., :])[labels[n...]]: logits float32 [N..., C] (rank >= 2),
// labels int32 or int64 [N...]; output float32 [N...]. Attribute "ignore_index" (optional): a
// label with that value gives loss 0. Splits: logits and labels on the same batch axis -> that
// axis; (B, B) -> B.
std::unique_ptr<OpDefinition> MakeSparseCrossEntropyOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_SPARSE_CROSS_ENTROPY_OP_H_
