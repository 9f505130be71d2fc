#ifndef LOOM_KERNELS_CPU_OPTIMIZERS_OPTIMIZER_KERNELS_H_
#define LOOM_KERNELS_CPU_OPTIMIZERS_OPTIMIZER_KERNELS_H_

// RegisterCpuOptimizerKernels: registers the CPU kernels of parameter updates ("sgd", "adamw") and
// of gradient clipping ("squared_norm", "clip_coefficient", "scale_by") in a KernelRegistry.
// RegisterCpuKernels calls it.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom {

// Registers the CPU kernels of parameter updates in `registry` under (op type, plan::CPU): "sgd",
// "adamw", and the steps of gradient clipping by global norm, "squared_norm", "clip_coefficient"
// and "scale_by". RegisterCpuKernels calls it. Fails with
// ALREADY_EXISTS at the first op type that is already registered for CPU (the ones before it stay
// registered).
absl::Status RegisterCpuOptimizerKernels(KernelRegistry* registry);

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_OPTIMIZERS_OPTIMIZER_KERNELS_H_
