#ifndef LOOM_CORE_DEVICE_NAME_H_
#define LOOM_CORE_DEVICE_NAME_H_

// Comparing and naming the devices and streams of a plan: SameDevice and SameStream, and the
// strings that logs, errors, traces, the cluster's device list and job placements use for them
// (DeviceName "node0/cpu:1", PlacementDeviceName "cpu:1", StreamName "node0/cpu:1/compute").

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/plan.pb.h"

namespace loom {

// The same device: node, type and index equal.
bool SameDevice(const plan::Device& a, const plan::Device& b);
// The same stream (so the same thread): device, kind (unspecified is compute) and index equal.
bool SameStream(const plan::Stream& a, const plan::Stream& b);
// "cpu", "cuda".
std::string DeviceTypeName(plan::DeviceType type);
// "node0/cpu:1": how logs, errors, traces and the cluster's device list name a device.
std::string DeviceName(const plan::Device& device);
// The same from its parts, for devices described outside a plan ("cpu", "cuda" as `type`).
std::string DeviceName(int64_t node, absl::string_view type, int64_t index);
// How a job's placement writes a device: "cpu:1" on node 0, "node1/cpu:0" elsewhere.
std::string PlacementDeviceName(const plan::Device& device);
// "node0/cpu:1/compute", "node0/cpu:1/copy_in.1".
std::string StreamName(const plan::Stream& stream);

}  // namespace loom

#endif  // LOOM_CORE_DEVICE_NAME_H_
