#ifndef LOOM_KERNELS_CPU_MOE_ROUTE_KERNEL_H_
#define LOOM_KERNELS_CPU_MOE_ROUTE_KERNEL_H_

// The CPU kernels of mixture-of-experts routing: "moe_route" (each token's top-k experts assigned
// to the experts' capacity slots, with drop counts and expert fractions) and its gradient
// "moe_route_grad". RegisterCpuKernels registers them; the CUDA kernels
// (kernels/cuda/moe_kernels.h) have exactly their semantics.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "moe_route": probs float32 [B, T, E] -> slot_token int32 [B, E, C], slot_weight float32
// [B, E, C], expert_fraction float32 [B, E], dropped float32 [B]; attribute "k" (1 or 2). C is the
// outputs' capacity axis. Per group: each token's top-k experts (ties to the lower index) with
// weights p_e / (sum of its chosen p); expert e's slots filled first with every token's first
// choice in token order, then with every second choice; an assignment to a full expert is
// dropped (counted in `dropped`); expert_fraction[e] = assignments choosing e / (k * T).
absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteKernel(const KernelInit& init);

// "moe_route_grad": (probs [B, T, E], slot_token [B, E, C], dslot_weight [B, E, C]) -> dprobs
// [B, T, E], attribute "k": for a slot of token t and expert e, with S the experts t chose and
// s = sum over S of p: dprobs[t, j] += dw * ([j == e] / s - p_e / s^2) for j in S, computed as
// dw * ([j == e] - w_e) / s with the slot's weight w_e (so exactly 0 for k = 1). A slot_token
// outside [-1, T) fails with INVALID_ARGUMENT naming it.
absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_MOE_ROUTE_KERNEL_H_
