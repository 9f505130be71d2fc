#include "kernels/cpu/cpu_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/bias_add_kernel.h"
#include "kernels/cpu/binary_kernels.h"
#include "kernels/cpu/cast_kernel.h"
#include "kernels/cpu/cross_entropy_kernel.h"
#include "kernels/cpu/data/data_kernels.h"
#include "kernels/cpu/embedding_kernel.h"
#include "kernels/cpu/fill_kernel.h"
#include "kernels/cpu/gradients/gradient_kernels.h"
#include "kernels/cpu/identity_kernel.h"
#include "kernels/cpu/layer_norm_kernel.h"
#include "kernels/cpu/layout_kernels.h"
#include "kernels/cpu/matmul_kernel.h"
#include "kernels/cpu/moe_route_kernel.h"
#include "kernels/cpu/moe_slot_kernels.h"
#include "kernels/cpu/ones_like_kernel.h"
#include "kernels/cpu/optimizers/optimizer_kernels.h"
#include "kernels/cpu/random_kernel.h"
#include "kernels/cpu/reduce_kernels.h"
#include "kernels/cpu/sleep_kernel.h"
#include "kernels/cpu/softmax_kernel.h"
#include "kernels/cpu/unary_kernels.h"
#include "kernels/cpu/zeros_like_kernel.h"
#include "kernels/flat_pack_kernels.h"
#include "kernels/kernel_table.h"

namespace loom {

absl::Status RegisterCpuKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {"matmul", cpu::CreateMatmulKernel},
      {"add", cpu::CreateAddKernel},
      {"subtract", cpu::CreateSubtractKernel},
      {"multiply", cpu::CreateMultiplyKernel},
      {"divide", cpu::CreateDivideKernel},
      {"bias_add", cpu::CreateBiasAddKernel},
      {"relu", cpu::CreateReluKernel},
      {"gelu", cpu::CreateGeluKernel},
      {"tanh", cpu::CreateTanhKernel},
      {"softmax", cpu::CreateSoftmaxKernel},
      {"scale", cpu::CreateScaleKernel},
      {"fill", cpu::CreateFillKernel},
      {"random", cpu::CreateRandomKernel},
      {"identity", cpu::CreateIdentityKernel},
      {"identity_after", cpu::CreateIdentityAfterKernel},
      {"offload", cpu::CreateOffloadKernel},
      {"reload", cpu::CreateReloadKernel},
      {"cast", cpu::CreateCastKernel},
      {"zeros_like", cpu::CreateZerosLikeKernel},
      {"ones_like", cpu::CreateOnesLikeKernel},
      {"sleep", cpu::CreateSleepKernel},
      {"log_softmax", cpu::CreateLogSoftmaxKernel},
      {"layer_norm", cpu::CreateLayerNormKernel},
      {"embedding", cpu::CreateEmbeddingKernel},
      {"reshape", cpu::CreateReshapeKernel},
      {"transpose", cpu::CreateTransposeKernel},
      {"slice", cpu::CreateSliceKernel},
      {"pad", cpu::CreatePadKernel},
      {"concat", cpu::CreateConcatKernel},
      {"reduce_sum", cpu::CreateReduceSumKernel},
      {"reduce_mean", cpu::CreateReduceMeanKernel},
      {"sparse_cross_entropy", cpu::CreateSparseCrossEntropyKernel},
      {"causal_attention", cpu::CreateCausalAttentionKernel},
      {"random_integers", cpu::CreateRandomIntegersKernel},
      {"moe_route", cpu::CreateMoeRouteKernel},
      {"moe_route_grad", cpu::CreateMoeRouteGradKernel},
      {"moe_dispatch", cpu::CreateMoeDispatchKernel},
      {"moe_combine", cpu::CreateMoeCombineKernel},
      {"moe_dispatch_grad", cpu::CreateMoeDispatchGradKernel},
      {"pack_flat", CreatePackFlatKernel},
      {"unpack_flat", CreateUnpackFlatKernel},
      {"pack_shards", CreatePackShardsKernel},
      {"unpack_shards", CreateUnpackShardsKernel},
  };
  if (absl::Status status = RegisterKernelTable(registry, plan::CPU, kEntries); !status.ok()) {
    return status;
  }
  // Groups with tables of their own: gradients, optimizers, data sources.
  if (absl::Status status = RegisterCpuGradientKernels(registry); !status.ok()) return status;
  if (absl::Status status = RegisterCpuOptimizerKernels(registry); !status.ok()) return status;
  return RegisterCpuDataKernels(registry);
}

}  // namespace loom
