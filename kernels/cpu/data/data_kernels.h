#ifndef LOOM_KERNELS_CPU_DATA_DATA_KERNELS_H_
#define LOOM_KERNELS_CPU_DATA_DATA_KERNELS_H_

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom {

// Registers the CPU kernels that read files (training data, checkpoints) in `registry` under
// (op type, plan::CPU): "safetensors_slice" and "token_batch". Fails with ALREADY_EXISTS at the
// first op type that is already registered for CPU (the ones before it stay registered). Separate
// from RegisterCpuKernels: a runtime that trains calls both.
absl::Status RegisterCpuDataKernels(KernelRegistry* registry);

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_DATA_DATA_KERNELS_H_
