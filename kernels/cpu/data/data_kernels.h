#ifndef LOOM_KERNELS_CPU_DATA_DATA_KERNELS_H_
#define LOOM_KERNELS_CPU_DATA_DATA_KERNELS_H_

// RegisterCpuDataKernels: registers the CPU kernels that read files, "safetensors_slice"
// (checkpoints) and "token_batch" (training data), in a KernelRegistry. RegisterCpuKernels calls
// it; the CUDA host-staged kernels run the same two kernels on the host.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom {

// Registers the CPU kernels that read files (training data, checkpoints) in `registry` under
// (op type, plan::CPU): "safetensors_slice" and "token_batch". Fails with ALREADY_EXISTS at the
// first op type that is already registered for CPU (the ones before it stay registered).
// RegisterCpuKernels calls it.
absl::Status RegisterCpuDataKernels(KernelRegistry* registry);

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_DATA_DATA_KERNELS_H_
