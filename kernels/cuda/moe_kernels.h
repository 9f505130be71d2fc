#ifndef LOOM_KERNELS_CUDA_MOE_KERNELS_H_
#define LOOM_KERNELS_CUDA_MOE_KERNELS_H_

// The registration of the CUDA mixture-of-experts kernels in two groups:
// RegisterCudaMoeRouteKernels (moe_route, moe_route_grad; moe_route_kernels.cu) and
// RegisterCudaMoeSlotKernels (moe_dispatch, moe_combine, moe_dispatch_grad; moe_slot_kernels.cu),
// and RegisterCudaMoeKernels, both, which RegisterCudaKernels calls.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// The CUDA mixture-of-experts kernels, with exactly the CPU kernels' semantics and checks (see
// kernels/cpu/moe_route_kernel.h and kernels/cpu/moe_slot_kernels.h): "moe_route",
// "moe_route_grad" (moe_route_kernels.cu), "moe_dispatch", "moe_combine" and "moe_dispatch_grad"
// (moe_slot_kernels.cu). Their float tensors are all float32 or all bfloat16 (computed in float);
// slot_token stays int32. A slot_token outside [-1, T) cannot fail the act that finds it on the
// GPU: it is skipped, recorded on the device, and fails the next Compute with INVALID_ARGUMENT
// naming it (moe_slot_index.h).

// Registers "moe_route" and "moe_route_grad". moe_route's slot_token and dropped are exactly the
// CPU's: each token's top-k is found in parallel, then each (group, expert) fills its slots in
// GShard's order (every first choice in token order, then every second choice) by a block-wide
// prefix count.
absl::Status RegisterCudaMoeRouteKernels(KernelRegistry* registry);

// Registers "moe_dispatch", "moe_combine" and "moe_dispatch_grad". The slot kernels sum a token's
// slots in the CPU's order (experts, then slots), found by a stable sort of the slots by token.
absl::Status RegisterCudaMoeSlotKernels(KernelRegistry* registry);

// Registers all of the above.
inline absl::Status RegisterCudaMoeKernels(KernelRegistry* registry) {
  if (absl::Status status = RegisterCudaMoeRouteKernels(registry); !status.ok()) return status;
  return RegisterCudaMoeSlotKernels(registry);
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_MOE_KERNELS_H_
