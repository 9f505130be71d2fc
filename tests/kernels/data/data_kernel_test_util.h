#ifndef LOOM_TESTS_KERNELS_DATA_DATA_KERNEL_TEST_UTIL_H_
#define LOOM_TESTS_KERNELS_DATA_DATA_KERNEL_TEST_UTIL_H_

// Building the data kernels of an OpCall as a job builds them: with KernelInit::files (where they
// may open files) and KernelInit::ending, which OpCall::Build leaves null.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/file_roots.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {

// Builds `call`'s kernel through a registry with the CPU kernels (the data kernels among them),
// opening files through `files` (null: anywhere, FileRoots::Unrestricted), which must outlive the
// kernel (KernelInit::files: a dataset reopens its files as it reads).
inline absl::StatusOr<std::unique_ptr<Kernel>> BuildDataKernel(
    const OpCall& call, const FileRoots* files = nullptr,
    const std::atomic<bool>* ending = nullptr) {
  static const FileRoots anywhere = FileRoots::Unrestricted();
  KernelRegistry registry;
  if (absl::Status status = RegisterCpuKernels(&registry); !status.ok()) return status;
  KernelInit init = call.Init();
  init.files = files != nullptr ? files : &anywhere;
  init.ending = ending;
  return registry.Create(plan::CPU, init);
}

// The values of an int32 or int64 tensor (token ids), widened.
inline std::vector<int64_t> TokenValues(const HostTensor& tensor) {
  std::vector<int64_t> values;
  if (tensor.data_type == plan::INT32) {
    for (int32_t value : tensor.Values<int32_t>()) values.push_back(value);
  } else {
    for (int64_t value : tensor.Values<int64_t>()) values.push_back(value);
  }
  return values;
}

// Builds `call`'s kernel as BuildDataKernel does (files anywhere) and runs it once.
inline absl::Status RunDataKernel(OpCall& call, int64_t piece = 0) {
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(call);
  if (!kernel.ok()) return kernel.status();
  return call.Compute(**kernel, piece);
}

}  // namespace loom::kernel_test

#endif  // LOOM_TESTS_KERNELS_DATA_DATA_KERNEL_TEST_UTIL_H_
