#include "runtime/device_memory.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/format_bytes.h"
#include "glog/logging.h"

namespace loom {

DeviceMemory::DeviceMemory(std::string device_name, int64_t budget_bytes,
                           std::unique_ptr<MemoryResource> resource)
    : device_name_(std::move(device_name)),
      budget_bytes_(budget_bytes),
      resource_(resource != nullptr ? std::move(resource)
                                    : std::make_unique<HostMemoryResource>()) {}

DeviceMemory::~DeviceMemory() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!allocations_.empty()) {
    LOG(ERROR) << device_name_ << ": " << allocations_.size()
               << " allocations were not freed before the device memory was destroyed";
    for (auto& [pointer, allocation] : allocations_) {
      resource_->Free(pointer, std::max<int64_t>(allocation.requested_bytes, 1));
    }
  }
}

absl::Status DeviceMemory::Reserve(int64_t bytes, const std::string& owner,
                                   int64_t requested_bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_name_, ": negative allocation of ", bytes, " bytes for ", owner));
  }
  if (budget_bytes_ > 0 && used_bytes_ + bytes > budget_bytes_) {
    // Name the largest holders, so the user sees what to shrink.
    std::vector<std::pair<int64_t, std::string>> holders;
    for (const auto& [pointer, allocation] : allocations_) {
      holders.emplace_back(allocation.charged_bytes, allocation.owner);
    }
    for (const auto& [name, charged] : charges_) holders.emplace_back(charged, name);
    std::sort(holders.begin(), holders.end(), std::greater<>());
    std::string largest;
    for (size_t i = 0; i < holders.size() && i < 3; ++i) {
      absl::StrAppend(&largest, i == 0 ? "" : ", ", holders[i].second, " (",
                      FormatBytes(holders[i].first), ")");
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", device_name_, ": memory budget of ", FormatBytes(budget_bytes_),
        " exceeded while allocating ", FormatBytes(bytes), " for ", owner, " (",
        requested_bytes == bytes
            ? ""
            : absl::StrCat(FormatBytes(requested_bytes), " rounded up by the allocator; "),
        FormatBytes(used_bytes_), " already in use",
        largest.empty() ? "" : absl::StrCat("; largest: ", largest),
        "). Raise the device's memory budget or use fewer or smaller register slots."));
  }
  used_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, used_bytes_);
  return absl::OkStatus();
}

absl::StatusOr<void*> DeviceMemory::Allocate(int64_t bytes, const std::string& owner) {
  // The budget is charged what the buffer takes (the resource's rounding included), so that the
  // accounts say what the device really holds.
  const int64_t charged = bytes > 0 ? resource_->Footprint(bytes) : bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = Reserve(charged, owner, bytes); !status.ok()) return status;
  absl::StatusOr<void*> pointer = resource_->Allocate(std::max<int64_t>(bytes, 1));
  if (!pointer.ok()) {
    used_bytes_ -= charged;
    return absl::Status(
        pointer.status().code(),
        absl::StrCat("device ", device_name_, ": ", pointer.status().message(), " for ", owner));
  }
  allocations_.emplace(*pointer, Allocation{bytes, charged, owner});
  return *pointer;
}

void DeviceMemory::Free(void* pointer) {
  if (pointer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto iterator = allocations_.find(pointer);
  CHECK(iterator != allocations_.end()) << device_name_ << ": freeing unknown pointer";
  used_bytes_ -= iterator->second.charged_bytes;
  const int64_t requested = iterator->second.requested_bytes;
  allocations_.erase(iterator);
  resource_->Free(pointer, std::max<int64_t>(requested, 1));
}

absl::Status DeviceMemory::Charge(int64_t bytes, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = Reserve(bytes, owner, bytes); !status.ok()) return status;
  charges_[owner] += bytes;
  return absl::OkStatus();
}

void DeviceMemory::Release(int64_t bytes, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  used_bytes_ -= bytes;
  auto iterator = charges_.find(owner);
  if (iterator != charges_.end()) {
    iterator->second -= bytes;
    if (iterator->second <= 0) charges_.erase(iterator);
  }
}

int64_t DeviceMemory::used_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_bytes_;
}

int64_t DeviceMemory::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_bytes_;
}

int64_t DeviceMemory::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t charged = 0;
  for (const auto& [owner, bytes] : charges_) charged += bytes;
  return used_bytes_ - charged;
}

}  // namespace loom
