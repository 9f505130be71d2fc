#include "compiler/compile_for_devices.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/placement.h"
#include "core/device_name.h"
#include "core/format_bytes.h"

namespace loom::compiler {
namespace {

bool HasOwnPlacement(const job::Placement& placement) {
  return placement.devices_size() > 0 || placement.hierarchy_size() > 0;
}

}  // namespace

std::string DescribeDevices(const DeviceSet& devices) {
  absl::flat_hash_set<int> nodes;
  bool gpus = false;
  for (const plan::Device& device : devices.devices) {
    nodes.insert(device.node());
    gpus = gpus || device.type() == plan::CUDA;
  }
  return absl::StrCat(
      FormatCount(static_cast<int64_t>(devices.devices.size()), gpus ? "GPU" : "CPU"), " on ",
      FormatCount(static_cast<int64_t>(nodes.size()), "node"));
}

std::string FitJobToDevices(const DeviceSet& devices, job::Job* job) {
  const job::Placement& placement = job->placement();
  if (placement.devices().empty() || placement.hierarchy_size() > 1) return "";
  if (job->stage_placements_size() > 0) return "";
  for (const job::Variable& variable : job->variables()) {
    if (HasOwnPlacement(variable.placement())) return "";
  }
  for (const job::Input& input : job->inputs()) {
    if (HasOwnPlacement(input.placement())) return "";
  }
  for (const job::Op& op : job->ops()) {
    if (HasOwnPlacement(op.placement())) return "";
  }
  const IndexedDeviceSet known_devices(devices);
  bool fits = true;
  for (const std::string& text : placement.devices()) {
    absl::StatusOr<plan::Device> device = ParseDevice(text);
    // A malformed placement is the compiler's to report.
    if (!device.ok()) return "";
    if (!known_devices.Contains(*device)) fits = false;
  }
  if (fits) return "";

  job::Placement replaced;
  for (const plan::Device& device : devices.devices) {
    replaced.add_devices(PlacementDeviceName(device));
  }
  std::string note = absl::StrCat("the job's placement [", absl::StrJoin(placement.devices(), ", "),
                                  "] does not fit the ", DescribeDevices(devices),
                                  " it is compiled for: placing the job on [",
                                  absl::StrJoin(replaced.devices(), ", "), "] instead");
  *job->mutable_placement() = std::move(replaced);
  return note;
}

absl::StatusOr<job::Job> ReadJobForDevices(const std::string& path, const DeviceSet& devices,
                                           int64_t steps, std::string* note) {
  absl::StatusOr<job::Job> job = ReadJobFile(path);
  if (!job.ok()) return job.status();
  std::string fitted = FitJobToDevices(devices, &*job);
  if (note != nullptr) *note = std::move(fitted);
  if (steps > 0) job->set_num_steps(steps);
  return job;
}

absl::StatusOr<std::unique_ptr<CompiledJob>> CompileJobWithStandardOps(
    job::Job job, const DeviceSet& devices, const CompileOptions& options) {
  auto compiled = std::make_unique<CompiledJob>();
  compiled->job = std::move(job);
  if (absl::Status status = RegisterStandardOps(&compiled->registry); !status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot register the standard ops: ", status.message()));
  }
  absl::StatusOr<CompileResult> result =
      Compile(compiled->job, compiled->registry, devices, options);
  if (!result.ok()) return result.status();
  compiled->result = std::move(*result);
  return compiled;
}

absl::StatusOr<std::unique_ptr<CompiledJob>> ReadAndCompileJob(const std::string& path,
                                                               const DeviceSet& devices,
                                                               int64_t steps, std::string* note) {
  absl::StatusOr<job::Job> job = ReadJobForDevices(path, devices, steps, note);
  if (!job.ok()) return job.status();
  return CompileJobWithStandardOps(std::move(*job), devices);
}

}  // namespace loom::compiler
