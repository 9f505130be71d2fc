#include "kernels/cpu/cpu_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/bias_add_kernel.h"
#include "kernels/cpu/binary_kernels.h"
#include "kernels/cpu/fill_kernel.h"
#include "kernels/cpu/identity_kernel.h"
#include "kernels/cpu/matmul_kernel.h"
#include "kernels/cpu/random_kernel.h"
#include "kernels/cpu/sleep_kernel.h"
#include "kernels/cpu/softmax_kernel.h"
#include "kernels/cpu/unary_kernels.h"

namespace loom {

absl::Status RegisterCpuKernels(KernelRegistry* registry) {
  struct Entry {
    const char* op_type;
    absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
  };
  static constexpr Entry kEntries[] = {
      {"matmul", cpu::CreateMatmulKernel},     {"add", cpu::CreateAddKernel},
      {"subtract", cpu::CreateSubtractKernel}, {"multiply", cpu::CreateMultiplyKernel},
      {"divide", cpu::CreateDivideKernel},     {"bias_add", cpu::CreateBiasAddKernel},
      {"relu", cpu::CreateReluKernel},         {"gelu", cpu::CreateGeluKernel},
      {"tanh", cpu::CreateTanhKernel},         {"softmax", cpu::CreateSoftmaxKernel},
      {"scale", cpu::CreateScaleKernel},       {"fill", cpu::CreateFillKernel},
      {"random", cpu::CreateRandomKernel},     {"identity", cpu::CreateIdentityKernel},
      {"sleep", cpu::CreateSleepKernel},
  };
  for (const Entry& entry : kEntries) {
    absl::Status status = registry->Register(entry.op_type, plan::CPU, entry.factory);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace loom
