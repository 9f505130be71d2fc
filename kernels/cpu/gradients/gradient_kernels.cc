#include "kernels/cpu/gradients/gradient_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/gradients/activation_grad_kernels.h"
#include "kernels/cpu/gradients/attention_grad_kernel.h"
#include "kernels/cpu/gradients/broadcast_grad_kernels.h"
#include "kernels/cpu/gradients/cross_entropy_grad_kernel.h"
#include "kernels/cpu/gradients/embedding_grad_kernel.h"
#include "kernels/cpu/gradients/layer_norm_grad_kernel.h"
#include "kernels/cpu/gradients/softmax_grad_kernels.h"
#include "kernels/kernel_table.h"

namespace loom {

absl::Status RegisterCpuGradientKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {"relu_grad", cpu::CreateReluGradKernel},
      {"gelu_grad", cpu::CreateGeluGradKernel},
      {"tanh_grad", cpu::CreateTanhGradKernel},
      {"softmax_grad", cpu::CreateSoftmaxGradKernel},
      {"log_softmax_grad", cpu::CreateLogSoftmaxGradKernel},
      {"layer_norm_grad", cpu::CreateLayerNormGradKernel},
      {"embedding_grad", cpu::CreateEmbeddingGradKernel},
      {"sparse_cross_entropy_grad", cpu::CreateSparseCrossEntropyGradKernel},
      {"causal_attention_grad", cpu::CreateCausalAttentionGradKernel},
      {"reduce_sum_to", cpu::CreateReduceSumToKernel},
      {"broadcast_to", cpu::CreateBroadcastToKernel},
  };
  return RegisterKernelTable(registry, plan::CPU, kEntries);
}

}  // namespace loom
