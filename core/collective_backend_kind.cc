#include "core/collective_backend_kind.h"

#include <algorithm>

namespace loom {

CollectiveBackendKind CollectiveBackendKindOf(const plan::Communicator& communicator) {
  const auto& devices = communicator.devices();
  if (!devices.empty() &&
      std::all_of(devices.begin(), devices.end(),
                  [](const plan::Device& device) { return device.type() == plan::CUDA; })) {
    return CollectiveBackendKind::kNccl;
  }
  const bool several_nodes =
      std::any_of(devices.begin(), devices.end(),
                  [&](const plan::Device& device) { return device.node() != devices[0].node(); });
  return several_nodes ? CollectiveBackendKind::kNetwork : CollectiveBackendKind::kSharedMemory;
}

}  // namespace loom
