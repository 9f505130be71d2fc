#include "kernels/kernel_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/device_name.h"

namespace loom {

absl::Status KernelRegistry::Register(const std::string& op_type, plan::DeviceType device_type,
                                      KernelFactory factory) {
  auto [iterator, inserted] =
      factories_.try_emplace({op_type, static_cast<int>(device_type)}, std::move(factory));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("a kernel for op '", op_type, "' on ",
                                                 DeviceTypeName(device_type),
                                                 " is already registered"));
  }
  return absl::OkStatus();
}

bool KernelRegistry::Contains(const std::string& op_type, plan::DeviceType device_type) const {
  return factories_.contains({op_type, static_cast<int>(device_type)});
}

absl::StatusOr<std::unique_ptr<Kernel>> KernelRegistry::Create(plan::DeviceType device_type,
                                                               const KernelInit& init) const {
  const std::string& op_type = init.conf->op_type();
  auto iterator = factories_.find({op_type, static_cast<int>(device_type)});
  if (iterator == factories_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "task '", init.task_name, "': no kernel for op type '", op_type, "' on ",
        DeviceTypeName(device_type), " (known: ", absl::StrJoin(OpTypes(device_type), ", "), ")"));
  }
  auto kernel = iterator->second(init);
  if (!kernel.ok()) {
    return absl::Status(kernel.status().code(),
                        absl::StrCat("task '", init.task_name, "' (op '", op_type,
                                     "'): ", kernel.status().message()));
  }
  return kernel;
}

std::vector<std::string> KernelRegistry::OpTypes(plan::DeviceType device_type) const {
  std::vector<std::string> names;
  for (const auto& [key, factory] : factories_) {
    if (key.second == static_cast<int>(device_type)) names.push_back(key.first);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace loom
