#include "kernels/cuda/cuda_kernels.h"

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/elementwise_kernels.h"
#include "kernels/cuda/gradient_kernels.h"
#include "kernels/cuda/host_staged_kernel.h"
#include "kernels/cuda/layout_kernels.h"
#include "kernels/cuda/matmul_kernel.h"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/optimizer_kernels.h"
#include "kernels/cuda/random_kernels.h"
#include "kernels/cuda/row_gradient_kernels.h"
#include "kernels/cuda/row_kernels.h"
#include "kernels/flat_pack_kernels.h"
#include "kernels/kernel_table.h"

namespace loom {

absl::Status RegisterCudaKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {"matmul", cuda::CreateMatmulKernel},
      // Byte copies on the stream: the CPU's implementation serves.
      {"pack_flat", CreatePackFlatKernel},
      {"unpack_flat", CreateUnpackFlatKernel},
      {"pack_shards", CreatePackShardsKernel},
      {"unpack_shards", CreateUnpackShardsKernel},
  };
  if (absl::Status status = RegisterKernelTable(registry, plan::CUDA, kEntries); !status.ok()) {
    return status;
  }
  // Groups with tables of their own.
  for (absl::Status (*group)(KernelRegistry*) :
       {cuda::RegisterCudaElementwiseKernels, cuda::RegisterCudaLayoutKernels,
        cuda::RegisterCudaOptimizerKernels, cuda::RegisterCudaRandomKernels,
        cuda::RegisterCudaMoeKernels, cuda::RegisterCudaAttentionKernels,
        cuda::RegisterCudaRowKernels, cuda::RegisterCudaGradientKernels,
        cuda::RegisterCudaRowGradientKernels, cuda::RegisterCudaHostStagedKernels}) {
    if (absl::Status status = group(registry); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace loom
