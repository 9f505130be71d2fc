#ifndef LOOM_COMPILER_OPS_CAUSAL_ATTENTION_OP_H_
#define LOOM_COMPILER_OPS_CAUSAL_ATTENTION_OP_H_

// The "causal_attention" op (MakeCausalAttentionOp): scaled dot-product attention with a causal
// mask on [B, H, T, Dh] tensors, split by batch or by head. One of the op definitions that
// RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table. Also the attention
// scale and the data type check that its gradient op "causal_attention_grad" shares.

#include <memory>

#include "absl/types/span.h"
#include "compiler/op_definition.h"

namespace loom::compiler {

// out = softmax(q k^T * scale + causal mask) v per batch and head: q, k, v [B, H, T, Dh], all
// float32 or all bfloat16 (mixed precision: float32 products and softmax, the probabilities
// rounded to bfloat16 for their product with v), output [B, H, T, Dh] of their type. Attribute
// "scale" (default 1 / sqrt(Dh)); lowering always passes it, from the logical Dh. Splits: all on
// the batch axis -> S(0); all on the heads axis -> S(1) (tensor parallel); all B -> B.
std::unique_ptr<OpDefinition> MakeCausalAttentionOp();

// The attention scale of an op whose first input is q [B, H, T, Dh]: attribute "scale", default
// 1 / sqrt(Dh). Shared with "causal_attention_grad".
absl::StatusOr<double> CausalAttentionScale(const OpContext& context);

// That the inputs, named `names`, are all float32 or all bfloat16. Shared with
// "causal_attention_grad".
absl::Status CheckCausalAttentionDataTypes(const OpContext& context,
                                           absl::Span<const char* const> names);

// That the scores of q [B, H, T, Dh], [B, H, T, T], are within the limit on a tensor's elements
// (core/tensor.h): the kernels hold them as scratch. Shared with "causal_attention_grad".
absl::Status CheckCausalAttentionScores(const Shape& q);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_CAUSAL_ATTENTION_OP_H_
