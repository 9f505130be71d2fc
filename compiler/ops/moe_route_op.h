#ifndef LOOM_COMPILER_OPS_MOE_ROUTE_OP_H_
#define LOOM_COMPILER_OPS_MOE_ROUTE_OP_H_

// The routing of a mixture-of-experts layer: "moe_route" (MakeMoeRouteOp) fills each expert's
// slots with tokens from the router's probabilities, up to a capacity per group (MoeCapacity),
// and "moe_route_grad" (MakeMoeRouteGradOp) is its gradient. Among the op definitions that
// RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table; the ops of
// compiler/ops/moe_slot_ops.h move the tokens to and from the slots.

#include <cstdint>
#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// "moe_route": the token-to-expert routing of a mixture-of-experts layer, per routing group
// (a sequence). Input probs float32 [B, T, E] (a softmax over E experts); attributes "k" (1 or 2,
// required, <= E) and "capacity_factor" (finite, > 0, required). Each expert takes at most
// C = MoeCapacity(capacity_factor, T, k, E) tokens per group. Every token's top-k experts (ties
// to the lower index) get the weights p_e / sum of its k chosen p (1 for k = 1); slots are filled
// as GShard does, first every token's first choice in token order, then every second choice; an
// assignment to a full expert is dropped. Outputs:
//   slot_token int32 [B, E, C]: the token in slot c of expert e, -1 for an empty slot;
//   slot_weight float32 [B, E, C]: its weight (0 for an empty slot);
//   expert_fraction float32 [B, E]: the fraction of the group's k * T assignments (before
//     dropping) that chose e (for the Switch Transformer load-balancing loss);
//   dropped float32 [B]: the group's assignments that got no slot.
// Splits: all S(0) (groups split); all B. Gradient: of slot_weight only (moe_route_grad).
std::unique_ptr<OpDefinition> MakeMoeRouteOp();

// "moe_route_grad"(probs [B, T, E], slot_token [B, E, C], dslot_weight [B, E, C]) -> dprobs
// [B, T, E], attribute "k": the gradient of the renormalised weights, through each token's chosen
// experts (recomputed from probs). Splits: all S(0); (B, B, P) -> P; all B.
std::unique_ptr<OpDefinition> MakeMoeRouteGradOp();

// C = ceil(capacity_factor * tokens * k / experts), computed in double in that order, and kept in
// [1, tokens] (an expert takes a token at most once: more slots would stay empty).
int64_t MoeCapacity(double capacity_factor, int64_t tokens, int64_t k, int64_t experts);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_MOE_ROUTE_OP_H_
