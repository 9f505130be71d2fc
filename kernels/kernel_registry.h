#ifndef LOOM_KERNELS_KERNEL_REGISTRY_H_
#define LOOM_KERNELS_KERNEL_REGISTRY_H_

// KernelRegistry: kernel factories (KernelFactory) keyed by (op type, device type). Whoever builds
// a runtime fills one (RegisterCpuKernels, RegisterCudaKernels) and passes it along to the actors,
// which create each task's kernel from it.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "proto/plan.pb.h"

namespace loom {

using KernelFactory = std::function<absl::StatusOr<std::unique_ptr<Kernel>>(const KernelInit&)>;

// Kernels keyed by (op type, device type). An explicit table: whoever builds a runtime fills one
// (for example with RegisterCpuKernels) and passes it along. Not thread-safe to mutate; read-only
// once jobs use it.
class KernelRegistry {
 public:
  // Fails with ALREADY_EXISTS if (op_type, device_type) is taken.
  absl::Status Register(const std::string& op_type, plan::DeviceType device_type,
                        KernelFactory factory);

  bool Contains(const std::string& op_type, plan::DeviceType device_type) const;

  // NOT_FOUND naming the task and op type when no kernel is registered; otherwise whatever the
  // factory says about the configuration.
  absl::StatusOr<std::unique_ptr<Kernel>> Create(plan::DeviceType device_type,
                                                 const KernelInit& init) const;

  // Sorted op types registered for a device type.
  std::vector<std::string> OpTypes(plan::DeviceType device_type) const;

 private:
  absl::flat_hash_map<std::pair<std::string, int>, KernelFactory> factories_;
};

}  // namespace loom

#endif  // LOOM_KERNELS_KERNEL_REGISTRY_H_
