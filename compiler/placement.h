#ifndef LOOM_COMPILER_PLACEMENT_H_
#define LOOM_COMPILER_PLACEMENT_H_

// Placements: the devices a variable, input or op runs on (Placement), as a row-major hierarchy
// whose ranks have coordinates; the groups along one hierarchy axis that collectives run in; and
// OnHosts, the same placement on the GPUs' hosts. ParseDevice reads a device name such as "cpu:0"
// or "node1/cpu:2".

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// An ordered list of devices seen as a hierarchy (row-major): rank r has coordinates
// Coordinates(r) with coordinate h in [0, hierarchy[h]).
class Placement {
 public:
  Placement() = default;
  Placement(std::vector<plan::Device> devices, std::vector<int64_t> hierarchy);

  // Parses "cpu:0", "node1/cpu:2", ...; an empty hierarchy means [number of devices].
  static absl::StatusOr<Placement> FromProto(const job::Placement& proto);

  int size() const { return static_cast<int>(devices_.size()); }
  int num_axes() const { return static_cast<int>(hierarchy_.size()); }
  const std::vector<int64_t>& hierarchy() const { return hierarchy_; }
  const std::vector<plan::Device>& devices() const { return devices_; }
  const plan::Device& device(int rank) const { return devices_[rank]; }

  std::vector<int64_t> Coordinates(int rank) const;
  int RankOf(const std::vector<int64_t>& coordinates) const;
  // The ranks that differ from `rank` only along hierarchy axis `axis`, in coordinate order
  // (the group a collective along that axis runs in). Includes `rank`.
  std::vector<int> GroupAlong(int rank, int axis) const;

  // The same placement with every GPU replaced by its host: the CPU device of the same node and
  // index (where work that only a CPU can do, such as reading files, runs for that GPU).
  Placement OnHosts() const;

  // "[cpu:0, cpu:1] as [2]".
  std::string ToString() const;
  bool operator==(const Placement& other) const;
  bool operator!=(const Placement& other) const { return !(*this == other); }

 private:
  std::vector<plan::Device> devices_;
  std::vector<int64_t> hierarchy_;
};

// "cpu:1" -> node 0, cpu, 1; "node2/cpu:0" -> node 2.
absl::StatusOr<plan::Device> ParseDevice(const std::string& text);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_PLACEMENT_H_
