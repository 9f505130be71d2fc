#ifndef LOOM_COMPILER_OPS_GRADIENT_OPS_H_
#define LOOM_COMPILER_OPS_GRADIENT_OPS_H_

// The definitions of the ops that autodiff (compiler/autodiff.h) emits: "ones_like", the seed of
// the backward pass, and the gradient ops of the activations, broadcasting, softmax, cross
// entropy, layer norm, slice ("pad"), embedding and causal attention. The gradient functions of
// compiler/ops/gradients.h emit them; RegisterStandardOps (compiler/ops/standard_ops.cc) puts
// them in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// Ops that autodiff (compiler/autodiff.h) emits; their CPU kernels are in kernels/cpu/gradients/
// (ones_like in kernels/cpu/).

// "ones_like"(x) -> a float32 tensor of x's shape filled with ones: the seed of the backward pass.
std::unique_ptr<OpDefinition> MakeOnesLikeOp();
// "relu_grad"(x, dy), "gelu_grad"(x, dy), "tanh_grad"(y, dy) -> dx: two float32 inputs of one
// shape; element-wise, and linear in dy (B, P -> P).
std::unique_ptr<OpDefinition> MakeActivationGradOp();
// "reduce_sum_to"(dy) -> dx of attribute "shape" (int list): the inverse of NumPy broadcasting.
std::unique_ptr<OpDefinition> MakeReduceSumToOp();
// "broadcast_to"(x) -> y of attribute "shape", times "scale" (float, default 1); optional "axes":
// the axes of y that x lacks (or has as 1). The gradient of reduce_sum and reduce_mean.
std::unique_ptr<OpDefinition> MakeBroadcastToOp();
// "softmax_grad"(y, dy), "log_softmax_grad"(y, dy) -> dx, from the forward output, over the last
// axis: S(i) on the other axes; B.
std::unique_ptr<OpDefinition> MakeRowwiseGradOp();
// "sparse_cross_entropy_grad"(logits, labels, dloss) -> dlogits: batch splits; B. Attribute
// "ignore_index" as the forward's.
std::unique_ptr<OpDefinition> MakeSparseCrossEntropyGradOp();
// "layer_norm_grad"(x, gamma, dy) -> (dx, dgamma, dbeta): (S(i), B, S(i)) -> (S(i), P, P) on the
// leading axes; B. Attribute "epsilon" as the forward's.
std::unique_ptr<OpDefinition> MakeLayerNormGradOp();
// "pad"(x) -> zeros of attribute "shape" (int list) holding x at attribute "begin" (int list):
// the gradient of "slice". S(i) on an axis it leaves whole; P; B.
std::unique_ptr<OpDefinition> MakePadOp();
// "embedding_grad"(ids, dy) -> dtable [rows, D], attribute "rows" (V): (S(i), S(i)) -> P;
// (B, S(last)) -> S(1); (B, B) -> S(0) (vocab parallel: lowering sets "row_offset" and
// "logical_rows" as embedding's does); (B, B) -> B.
std::unique_ptr<OpDefinition> MakeEmbeddingGradOp();
// "causal_attention_grad"(q, k, v, dy) -> (dq, dk, dv): all S(0), all S(1), or all B. Attribute
// "scale" as the forward's (lowering makes it explicit).
std::unique_ptr<OpDefinition> MakeCausalAttentionGradOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_GRADIENT_OPS_H_
