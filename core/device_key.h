#ifndef LOOM_CORE_DEVICE_KEY_H_
#define LOOM_CORE_DEVICE_KEY_H_

// DeviceKey: a device (node, type, index) as a plain value with equality and an absl hash, so that
// devices can key hash sets and maps; plan::Device, a proto message, has no hash. Plan validation
// and the compiler's logical graph, lowering and memory estimate use it.

#include <utility>

#include "proto/plan.pb.h"

namespace loom {

// A device as a plain value, for hash sets and maps of devices (plan::Device, a message, has no
// hash; equal keys are SameDevice).
struct DeviceKey {
  int node = 0;
  plan::DeviceType type = plan::DEVICE_TYPE_UNSPECIFIED;
  int index = 0;

  static DeviceKey Of(const plan::Device& device) {
    return DeviceKey{device.node(), device.type(), device.index()};
  }

  friend bool operator==(const DeviceKey& a, const DeviceKey& b) = default;
  template <typename H>
  friend H AbslHashValue(H hash, const DeviceKey& key) {
    return H::combine(std::move(hash), key.node, key.type, key.index);
  }
};

}  // namespace loom

#endif  // LOOM_CORE_DEVICE_KEY_H_
