#include "cli/device_spec.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/arguments.h"

namespace loom::cli {
namespace {

constexpr char kForms[] = "cpu:N, cuda:all or cuda:I[,J...] (e.g. cpu:4, cuda:0,1)";

absl::Status Malformed(const std::string& command, const std::string& text, absl::string_view why) {
  return UsageError(command, absl::StrCat("--devices '", text, "': ", why, "; write ", kForms));
}

}  // namespace

std::string DeviceSpec::ToString() const {
  if (type == plan::CPU) return absl::StrCat("cpu:", indices.size());
  return absl::StrCat("cuda:", absl::StrJoin(indices, ","));
}

compiler::DeviceSet DeviceSpec::Spread(int nodes) const {
  compiler::DeviceSet set;
  if (nodes < 1) nodes = 1;
  const int64_t count = size();
  for (int node = 0; node < nodes; ++node) {
    const int64_t begin = count * node / nodes;
    const int64_t end = count * (node + 1) / nodes;
    for (int64_t position = 0; position < end - begin; ++position) {
      plan::Device device;
      device.set_node(node);
      device.set_type(type);
      device.set_index(indices[position]);
      set.devices.push_back(device);
    }
  }
  return set;
}

absl::StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& command, const std::string& text,
                                           const GpuCounter& gpu_count) {
  absl::string_view view(text);
  DeviceSpec spec;
  if (absl::ConsumePrefix(&view, "cpu:")) {
    int count = 0;
    if (!absl::SimpleAtoi(view, &count) || count < 1) {
      return Malformed(command, text, "cpu:N needs a whole number N >= 1 of CPU devices");
    }
    for (int index = 0; index < count; ++index) spec.indices.push_back(index);
    return spec;
  }
  if (!absl::ConsumePrefix(&view, "cuda:")) {
    return Malformed(command, text, "unknown device type");
  }
  spec.type = plan::CUDA;
  if (view == "all") {
    absl::StatusOr<int> count = gpu_count();
    if (!count.ok()) {
      return absl::Status(
          count.status().code(),
          absl::StrCat(command, ": --devices cuda:all: ", count.status().message()));
    }
    if (*count < 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(command, ": --devices cuda:all: this machine has no GPU"));
    }
    for (int index = 0; index < *count; ++index) spec.indices.push_back(index);
    return spec;
  }
  for (absl::string_view part : absl::StrSplit(view, ',')) {
    int index = -1;
    if (!absl::SimpleAtoi(part, &index) || index < 0) {
      return Malformed(command, text,
                       absl::StrCat("'", part, "' is not a GPU index (a whole number >= 0)"));
    }
    if (std::find(spec.indices.begin(), spec.indices.end(), index) != spec.indices.end()) {
      return Malformed(command, text, absl::StrCat("cuda:", index, " is named twice"));
    }
    spec.indices.push_back(index);
  }
  std::sort(spec.indices.begin(), spec.indices.end());
  return spec;
}

}  // namespace loom::cli
