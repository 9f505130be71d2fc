#ifndef LOOM_COMPILER_OPS_CAUSAL_ATTENTION_OP_H_
#define LOOM_COMPILER_OPS_CAUSAL_ATTENTION_OP_H_

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// out = softmax(q k^T * scale + causal mask) v per batch and head: q, k, v float32 [B, H, T, Dh],
// output [B, H, T, Dh]. Attribute "scale" (default 1 / sqrt(Dh)); lowering always passes it, from
// the logical Dh. Splits: all on the batch axis -> S(0); all on the heads axis -> S(1) (tensor
// parallel); all B -> B.
std::unique_ptr<OpDefinition> MakeCausalAttentionOp();

// The attention scale of an op whose first input is q [B, H, T, Dh]: attribute "scale", default
// 1 / sqrt(Dh). Shared with "causal_attention_grad".
absl::StatusOr<double> CausalAttentionScale(const OpContext& context);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_CAUSAL_ATTENTION_OP_H_
