#ifndef LOOM_RUNTIME_DEVICE_NAME_H_
#define LOOM_RUNTIME_DEVICE_NAME_H_

#include <string>

#include "proto/plan.pb.h"

namespace loom {

// The same device: node, type and index equal.
bool SameDevice(const plan::Device& a, const plan::Device& b);
// The same stream (so the same thread): device, kind (unspecified is compute) and index equal.
bool SameStream(const plan::Stream& a, const plan::Stream& b);
// "cpu", "cuda".
std::string DeviceTypeName(plan::DeviceType type);
// "node0/cpu:1".
std::string DeviceName(const plan::Device& device);
// "node0/cpu:1/compute", "node0/cpu:1/copy_in.1".
std::string StreamName(const plan::Stream& stream);

}  // namespace loom

#endif  // LOOM_RUNTIME_DEVICE_NAME_H_
