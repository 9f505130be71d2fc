// The table of every op the compiler knows.
#include "compiler/op_definition.h"
#include "compiler/ops/bias_add_op.h"
#include "compiler/ops/cast_op.h"
#include "compiler/ops/causal_attention_op.h"
#include "compiler/ops/clip_ops.h"
#include "compiler/ops/concat_op.h"
#include "compiler/ops/elementwise_ops.h"
#include "compiler/ops/embedding_op.h"
#include "compiler/ops/gradient_ops.h"
#include "compiler/ops/gradients.h"
#include "compiler/ops/identity_after_op.h"
#include "compiler/ops/layer_norm_op.h"
#include "compiler/ops/matmul_op.h"
#include "compiler/ops/moe_route_op.h"
#include "compiler/ops/moe_slot_ops.h"
#include "compiler/ops/reduce_ops.h"
#include "compiler/ops/reshape_op.h"
#include "compiler/ops/sleep_op.h"
#include "compiler/ops/slice_op.h"
#include "compiler/ops/softmax_ops.h"
#include "compiler/ops/sparse_cross_entropy_op.h"
#include "compiler/ops/transpose_op.h"

namespace loom::compiler {

absl::Status RegisterStandardOps(OpRegistry* registry) {
  struct Entry {
    const char* op_type;
    std::unique_ptr<OpDefinition> definition;
  };
  std::vector<Entry> entries;
  entries.push_back({"matmul", MakeMatmulOp()});
  for (const char* op_type : {"add", "subtract", "multiply", "divide"}) {
    entries.push_back({op_type, MakeBinaryOp(op_type)});
  }
  for (const char* op_type : {"relu", "gelu", "tanh"}) {
    entries.push_back({op_type, MakeUnaryOp(/*linear=*/false)});
  }
  entries.push_back({"scale", MakeScaleOp()});
  entries.push_back({"identity", MakeUnaryOp(/*linear=*/true)});
  entries.push_back({"cast", MakeCastOp()});
  entries.push_back({"bias_add", MakeBiasAddOp()});
  entries.push_back({"softmax", MakeSoftmaxOp()});
  entries.push_back({"log_softmax", MakeLogSoftmaxOp()});
  entries.push_back({"layer_norm", MakeLayerNormOp()});
  entries.push_back({"embedding", MakeEmbeddingOp()});
  entries.push_back({"reshape", MakeReshapeOp()});
  entries.push_back({"transpose", MakeTransposeOp()});
  entries.push_back({"slice", MakeSliceOp()});
  entries.push_back({"concat", MakeConcatOp()});
  entries.push_back({"reduce_sum", MakeReduceSumOp()});
  entries.push_back({"reduce_mean", MakeReduceMeanOp()});
  entries.push_back({"sparse_cross_entropy", MakeSparseCrossEntropyOp()});
  entries.push_back({"causal_attention", MakeCausalAttentionOp()});
  entries.push_back({"sleep", MakeSleepOp()});
  entries.push_back({"moe_route", MakeMoeRouteOp()});
  entries.push_back({kMoeDispatchOpType, MakeMoeDispatchOp()});
  entries.push_back({"moe_combine", MakeMoeCombineOp()});
  // The ops autodiff emits (compiler/autodiff.h).
  entries.push_back({"ones_like", MakeOnesLikeOp()});
  for (const char* op_type : {"relu_grad", "gelu_grad", "tanh_grad"}) {
    entries.push_back({op_type, MakeActivationGradOp()});
  }
  entries.push_back({"reduce_sum_to", MakeReduceSumToOp()});
  entries.push_back({"broadcast_to", MakeBroadcastToOp()});
  entries.push_back({"softmax_grad", MakeRowwiseGradOp()});
  entries.push_back({"log_softmax_grad", MakeRowwiseGradOp()});
  entries.push_back({"sparse_cross_entropy_grad", MakeSparseCrossEntropyGradOp()});
  entries.push_back({"layer_norm_grad", MakeLayerNormGradOp()});
  entries.push_back({"pad", MakePadOp()});
  entries.push_back({"embedding_grad", MakeEmbeddingGradOp()});
  entries.push_back({"causal_attention_grad", MakeCausalAttentionGradOp()});
  entries.push_back({"moe_route_grad", MakeMoeRouteGradOp()});
  entries.push_back({"moe_dispatch_grad", MakeMoeDispatchGradOp()});
  // Gradient clipping (compiler/gradient_clipping.h).
  entries.push_back({"squared_norm", MakeSquaredNormOp()});
  entries.push_back({"clip_coefficient", MakeClipCoefficientOp()});
  entries.push_back({"scale_by", MakeScaleByOp()});
  // Recomputation (compiler/recomputation.h).
  entries.push_back({"identity_after", MakeIdentityAfterOp()});
  // Activation offload (compiler/activation_offload.h): copies, into host memory and back.
  entries.push_back({"offload", MakeUnaryOp(/*linear=*/true)});
  entries.push_back({"reload", MakeUnaryOp(/*linear=*/true)});
  for (Entry& entry : entries) {
    entry.definition = WithGradient(entry.op_type, std::move(entry.definition));
    if (absl::Status status = registry->Register(entry.op_type, std::move(entry.definition));
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
