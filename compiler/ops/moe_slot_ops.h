#ifndef LOOM_COMPILER_OPS_MOE_SLOT_OPS_H_
#define LOOM_COMPILER_OPS_MOE_SLOT_OPS_H_

// The token exchange of a mixture-of-experts layer around moe_route's slots: "moe_dispatch"
// copies each slot's token row for its expert, "moe_combine" adds the experts' weighted outputs
// back per token, and "moe_dispatch_grad" is moe_dispatch's gradient. Among the op definitions
// that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// The token exchange of a mixture-of-experts layer, around moe_route's slots (slot_token int32
// [B, E, C]: a token index of the group, or -1 for an empty slot).

// "moe_dispatch"(x float32 [B, T, W], slot_token [B, E, C]) -> [B, E, C, W]: each slot's token
// row, zeros for empty slots. Splits: (S(0), S(0)) -> S(0); (S(2), B) -> S(3); (P, B) -> P;
// (B, B) -> B. Gradient: of x (moe_dispatch_grad).
inline constexpr char kMoeDispatchOpType[] = "moe_dispatch";
std::unique_ptr<OpDefinition> MakeMoeDispatchOp();

// "moe_dispatch_grad"(dy [B, E, C, W], slot_token [B, E, C]) -> dx [B, T, W], attribute "tokens"
// (T): every slot's row added back to its token. Splits as moe_combine's, without the weights.
std::unique_ptr<OpDefinition> MakeMoeDispatchGradOp();

// "moe_combine"(expert_out float32 [B, E, C, W], slot_token [B, E, C], slot_weight float32
// [B, E, C]) -> [B, T, W], attribute "tokens" (T): y[b, t] = sum over the slots holding t of
// slot_weight * expert_out (experts in order, then slots); tokens in no slot get zeros. Splits:
// (S(0), S(0), S(0)) -> S(0); (S(3), B, B) -> S(2); (P, B, B) -> P; (B, B, B) -> B. Gradients:
// of expert_out, slot_weight * (dy's rows dispatched to the slots); of slot_weight, the dot
// product of expert_out with those rows (composed of moe_dispatch, reshape, multiply and
// reduce_sum).
std::unique_ptr<OpDefinition> MakeMoeCombineOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_MOE_SLOT_OPS_H_
