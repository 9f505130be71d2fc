#ifndef LOOM_KERNELS_CPU_MOE_SLOT_KERNELS_H_
#define LOOM_KERNELS_CPU_MOE_SLOT_KERNELS_H_

// The CPU kernels of the mixture-of-experts token exchange around moe_route's slots:
// "moe_dispatch" (token rows into expert slots), "moe_combine" (expert outputs weighted back into
// token rows) and "moe_dispatch_grad". RegisterCpuKernels registers them; the CUDA slot kernels
// have exactly their semantics.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// The token exchange around moe_route's slots (slot_token int32 [B, E, C]: a token of the group or
// -1). A slot_token outside [-1, T) fails Compute with INVALID_ARGUMENT naming the slot.

// "moe_dispatch": (x float32 [B, T, W], slot_token) -> [B, E, C, W], each slot's token row (zeros
// for an empty slot).
absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchKernel(const KernelInit& init);

// "moe_combine": (expert_out float32 [B, E, C, W], slot_token, slot_weight float32 [B, E, C]) ->
// [B, T, W]: y[b, t] = sum over the slots holding t, experts in order then slots, of
// slot_weight * expert_out. T is the output's axis 1.
absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeCombineKernel(const KernelInit& init);

// "moe_dispatch_grad": (dy [B, E, C, W], slot_token) -> dx [B, T, W]: moe_combine with weights 1.
absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_MOE_SLOT_KERNELS_H_
