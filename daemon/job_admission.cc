#include "daemon/job_admission.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/placement.h"
#include "core/device_name.h"
#include "runtime/plan_validation.h"

namespace loom::daemon {
namespace {

// A placement of the job and what it places ("op 'y'").
struct NamedPlacement {
  std::string owner;
  const job::Placement* placement;
};

std::vector<NamedPlacement> PlacementsOf(const job::Job& job) {
  std::vector<NamedPlacement> placements;
  placements.push_back({"the job (its default placement)", &job.placement()});
  for (int stage = 0; stage < job.stage_placements_size(); ++stage) {
    placements.push_back({absl::StrCat("stage ", stage), &job.stage_placements(stage)});
  }
  for (const job::Variable& variable : job.variables()) {
    placements.push_back({absl::StrCat("variable '", variable.name(), "'"), &variable.placement()});
  }
  for (const job::Input& input : job.inputs()) {
    placements.push_back({absl::StrCat("input '", input.name(), "'"), &input.placement()});
  }
  for (const job::Op& op : job.ops()) {
    placements.push_back({absl::StrCat("op '", op.name(), "'"), &op.placement()});
  }
  return placements;
}

// INVALID_ARGUMENT naming the tensor when a shape's element count overflows 64 bits.
absl::Status CheckShapeSize(const std::string& what,
                            const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t elements = 1;
  for (int64_t extent : shape) {
    if (extent > 0 && __builtin_mul_overflow(elements, extent, &elements)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape [", absl::StrJoin(shape, ", "),
                                                     "] has more elements than fit in 64 bits"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJobShapes(const job::Job& job) {
  for (const job::Variable& variable : job.variables()) {
    absl::Status status =
        CheckShapeSize(absl::StrCat("variable '", variable.name(), "'"), variable.shape());
    if (!status.ok()) return status;
  }
  for (const job::Input& input : job.inputs()) {
    absl::Status status = CheckShapeSize(absl::StrCat("input '", input.name(), "'"), input.shape());
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CheckJobFitsCluster(const job::Job& job, const compiler::DeviceSet& devices) {
  const compiler::IndexedDeviceSet known_devices(devices);
  absl::flat_hash_set<std::string> needed;
  std::string first_outside;
  for (const NamedPlacement& named : PlacementsOf(job)) {
    for (const std::string& text : named.placement->devices()) {
      absl::StatusOr<plan::Device> device = compiler::ParseDevice(text);
      if (!device.ok()) continue;  // the compiler names the op
      needed.insert(DeviceName(*device));
      if (first_outside.empty() && !known_devices.Contains(*device)) {
        first_outside = absl::StrCat(named.owner, " is placed on ", text);
        // "cpu:2" is node 0's: say so, as that is what surprises on a cluster.
        if (!absl::StartsWith(text, "node")) {
          absl::StrAppend(&first_outside, " (", DeviceName(*device),
                          ": a device named without 'nodeK/' is node 0's)");
        }
      }
    }
  }
  if (first_outside.empty()) return absl::OkStatus();
  const size_t have = devices.devices.size();
  const std::string remedy =
      ". Place the job on the cluster's devices, or start loomd with more (--devices)";
  if (needed.size() > have) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", job.name(), "' needs ", needed.size(), " devices but the cluster has ", have, " (",
        devices.ToString(), "): ", first_outside, remedy));
  }
  // As many devices as the cluster has, or fewer, but one of them is not the cluster's.
  return absl::ResourceExhaustedError(absl::StrCat(
      "job '", job.name(), "' is placed on a device the cluster does not have: ", first_outside,
      ". The cluster's ", have, " device", have == 1 ? " is " : "s are ", devices.ToString(),
      remedy));
}

absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> AdmitJob(
    job::Job job, const compiler::DeviceSet& devices, const compiler::CompileOptions& options) {
  if (absl::Status status = CheckJobShapes(job); !status.ok()) return status;
  if (absl::Status status = CheckJobFitsCluster(job, devices); !status.ok()) return status;
  if (!job.loss().empty() &&
      std::find(job.fetch().begin(), job.fetch().end(), job.loss()) == job.fetch().end()) {
    job.add_fetch(job.loss());
  }
  const std::string name = job.name();
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled =
      compiler::CompileJobWithStandardOps(std::move(job), devices, options);
  if (!compiled.ok()) return compiled.status();
  // What the runtime would refuse when the job's turn comes is refused now.
  const plan::Plan& plan = (*compiled)->result.plan;
  if (plan.tasks_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", name, "' has nothing to run: it has no ops, and fetches nothing"));
  }
  // What the nodes will run: each node's plan.
  for (const plan::Plan& node_plan : (*compiled)->result.node_plans) {
    if (node_plan.tasks_size() == 0) continue;  // a node the job does not use
    if (absl::Status status = ValidatePlan(node_plan); !status.ok()) {
      return absl::InternalError(
          absl::StrCat("job '", name, "' compiled into an invalid plan for node ", node_plan.node(),
                       " (a compiler bug): ", status.message()));
    }
  }
  return compiled;
}

}  // namespace loom::daemon
