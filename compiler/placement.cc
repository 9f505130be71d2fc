#include "compiler/placement.h"

#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/checked_arithmetic.h"
#include "core/device_key.h"
#include "core/device_name.h"

namespace loom::compiler {

Placement::Placement(std::vector<plan::Device> devices, std::vector<int64_t> hierarchy)
    : devices_(std::move(devices)), hierarchy_(std::move(hierarchy)) {
  if (hierarchy_.empty()) hierarchy_.push_back(static_cast<int64_t>(devices_.size()));
}

absl::StatusOr<plan::Device> ParseDevice(const std::string& text) {
  absl::string_view view(text);
  plan::Device device;
  if (absl::ConsumePrefix(&view, "node")) {
    size_t slash = view.find('/');
    int node;
    if (slash == absl::string_view::npos || !absl::SimpleAtoi(view.substr(0, slash), &node) ||
        node < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot parse device '", text, "' (expected cpu:N or nodeK/cpu:N)"));
    }
    device.set_node(node);
    view.remove_prefix(slash + 1);
  }
  if (absl::ConsumePrefix(&view, "cpu:")) {
    device.set_type(plan::CPU);
  } else if (absl::ConsumePrefix(&view, "cuda:")) {
    device.set_type(plan::CUDA);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot parse device '", text, "' (expected cpu:N, cuda:N or nodeK/cpu:N)"));
  }
  int index;
  if (!absl::SimpleAtoi(view, &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse device index in '", text, "'"));
  }
  device.set_index(index);
  return device;
}

absl::StatusOr<Placement> Placement::FromProto(const job::Placement& proto) {
  if (proto.devices().empty()) return absl::InvalidArgumentError("the placement has no devices");
  std::vector<plan::Device> devices;
  // A set, not a scan of the list: a job listing many devices must not take quadratic time.
  absl::flat_hash_set<DeviceKey> seen;
  for (const std::string& text : proto.devices()) {
    absl::StatusOr<plan::Device> device = ParseDevice(text);
    if (!device.ok()) return device.status();
    if (!seen.insert(DeviceKey::Of(*device)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the placement lists device '", text, "' twice"));
    }
    devices.push_back(*device);
  }
  std::vector<int64_t> hierarchy(proto.hierarchy().begin(), proto.hierarchy().end());
  if (!hierarchy.empty()) {
    // Checked: a product that wraps could equal the number of devices (issue 56).
    const int64_t device_count = static_cast<int64_t>(devices.size());
    int64_t product = 1;
    for (int64_t extent : hierarchy) {
      if (extent < 1) {
        return absl::InvalidArgumentError(absl::StrCat("the placement's hierarchy [",
                                                       absl::StrJoin(hierarchy, ", "),
                                                       "] has an extent below 1"));
      }
      std::optional<int64_t> next = CheckedMultiply(product, extent);
      if (!next.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the placement's hierarchy [", absl::StrJoin(hierarchy, ", "),
                         "] has more positions than fit in 64 bits but the placement lists ",
                         devices.size(), " devices"));
      }
      product = *next;
    }
    if (product != device_count) {
      return absl::InvalidArgumentError(
          absl::StrCat("the placement's hierarchy [", absl::StrJoin(hierarchy, ", "), "] has ",
                       product, " positions but the placement lists ", devices.size(), " devices"));
    }
  }
  return Placement(std::move(devices), std::move(hierarchy));
}

std::vector<int64_t> Placement::Coordinates(int rank) const {
  std::vector<int64_t> coordinates(hierarchy_.size());
  for (int axis = num_axes() - 1; axis >= 0; --axis) {
    coordinates[axis] = rank % hierarchy_[axis];
    rank /= static_cast<int>(hierarchy_[axis]);
  }
  return coordinates;
}

int Placement::RankOf(const std::vector<int64_t>& coordinates) const {
  int64_t rank = 0;
  for (int axis = 0; axis < num_axes(); ++axis) rank = rank * hierarchy_[axis] + coordinates[axis];
  return static_cast<int>(rank);
}

std::vector<int> Placement::GroupAlong(int rank, int axis) const {
  std::vector<int64_t> coordinates = Coordinates(rank);
  std::vector<int> group;
  for (int64_t i = 0; i < hierarchy_[axis]; ++i) {
    coordinates[axis] = i;
    group.push_back(RankOf(coordinates));
  }
  return group;
}

Placement Placement::OnHosts() const {
  Placement hosts = *this;
  for (plan::Device& device : hosts.devices_) device.set_type(plan::CPU);
  return hosts;
}

std::string Placement::ToString() const {
  std::vector<std::string> names;
  for (const plan::Device& device : devices_) {
    names.push_back(PlacementDeviceName(device));
  }
  return absl::StrCat("[", absl::StrJoin(names, ", "), "] as [", absl::StrJoin(hierarchy_, ", "),
                      "]");
}

bool Placement::operator==(const Placement& other) const {
  if (hierarchy_ != other.hierarchy_ || devices_.size() != other.devices_.size()) return false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].node() != other.devices_[i].node() ||
        devices_[i].type() != other.devices_[i].type() ||
        devices_[i].index() != other.devices_[i].index()) {
      return false;
    }
  }
  return true;
}

}  // namespace loom::compiler
