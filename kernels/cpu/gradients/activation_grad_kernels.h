#ifndef LOOM_KERNELS_CPU_GRADIENTS_ACTIVATION_GRAD_KERNELS_H_
#define LOOM_KERNELS_CPU_GRADIENTS_ACTIVATION_GRAD_KERNELS_H_

// The CPU kernels of the gradients of the element-wise activations: "relu_grad", "gelu_grad" (of
// the exact GELU) and "tanh_grad" (from the forward output), each a float32 dx from a forward
// tensor and dy. RegisterCpuGradientKernels registers them; the CUDA ones are in
// kernels/cuda/gradient_kernels.h.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Gradients of the element-wise activations: two float32 inputs of one shape (a forward tensor
// and dy, the gradient of the forward output) and one float32 output dx of that shape.

// "relu_grad"(x, dy) -> dx = dy where x > 0, else 0 (0 at x = 0, like PyTorch).
absl::StatusOr<std::unique_ptr<Kernel>> CreateReluGradKernel(const KernelInit& init);

// "gelu_grad"(x, dy) -> dx = dy * (Phi(x) + x * phi(x)), the derivative of the exact GELU
// x * Phi(x) with Phi(x) = 0.5 * (1 + erf(x / sqrt(2))) and phi the standard normal density.
absl::StatusOr<std::unique_ptr<Kernel>> CreateGeluGradKernel(const KernelInit& init);

// "tanh_grad"(y, dy) -> dx = dy * (1 - y^2), from the forward OUTPUT y = tanh(x).
absl::StatusOr<std::unique_ptr<Kernel>> CreateTanhGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_ACTIVATION_GRAD_KERNELS_H_
