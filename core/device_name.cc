#include "core/device_name.h"

#include "absl/strings/str_cat.h"

namespace loom {

bool SameDevice(const plan::Device& a, const plan::Device& b) {
  return a.node() == b.node() && a.type() == b.type() && a.index() == b.index();
}

bool SameStream(const plan::Stream& a, const plan::Stream& b) {
  auto kind = [](const plan::Stream& stream) {
    return stream.kind() == plan::STREAM_KIND_UNSPECIFIED ? plan::STREAM_COMPUTE : stream.kind();
  };
  return SameDevice(a.device(), b.device()) && kind(a) == kind(b) && a.index() == b.index();
}

std::string DeviceTypeName(plan::DeviceType type) {
  switch (type) {
    case plan::CPU:
      return "cpu";
    case plan::CUDA:
      return "cuda";
    default:
      return "unspecified";
  }
}

std::string DeviceName(const plan::Device& device) {
  return DeviceName(device.node(), DeviceTypeName(device.type()), device.index());
}

std::string DeviceName(int64_t node, absl::string_view type, int64_t index) {
  return absl::StrCat("node", node, "/", type, ":", index);
}

std::string PlacementDeviceName(const plan::Device& device) {
  if (device.node() != 0) return DeviceName(device);
  return absl::StrCat(DeviceTypeName(device.type()), ":", device.index());
}

std::string StreamName(const plan::Stream& stream) {
  const char* kind = "compute";
  switch (stream.kind()) {
    case plan::STREAM_COPY_IN:
      kind = "copy_in";
      break;
    case plan::STREAM_COPY_OUT:
      kind = "copy_out";
      break;
    case plan::STREAM_COMMUNICATION:
      kind = "communication";
      break;
    default:
      break;
  }
  std::string name = absl::StrCat(DeviceName(stream.device()), "/", kind);
  if (stream.index() != 0) absl::StrAppend(&name, ".", stream.index());
  return name;
}

}  // namespace loom
