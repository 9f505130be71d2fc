#include "daemon/job_checkpoint.h"

#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::daemon {
namespace {

std::string ValueName(absl::string_view task) { return absl::StrCat("value:", task); }

std::string StateName(int state, absl::string_view task) {
  return absl::StrCat("state", state, ":", task);
}

// The logical variables of `plan` from the parts of `nodes`.
absl::StatusOr<checkpoint::Checkpoint> ReadAndAssembleParts(const plan::Plan& plan,
                                                            const std::vector<int>& nodes,
                                                            absl::string_view parts) {
  // Every part's tensors by name (value:TASK, state<i>:TASK: task names are unique in a plan).
  std::map<std::string, HostTensor> pieces;
  for (int node : nodes) {
    absl::StatusOr<checkpoint::Checkpoint> part =
        checkpoint::ReadSafetensors(CheckpointPartPath(parts, node));
    if (!part.ok()) {
      return absl::Status(
          part.status().code(),
          absl::StrCat("node ", node, "'s checkpoint part: ", part.status().message()));
    }
    pieces.merge(part->tensors);
  }
  auto find = [&](const plan::VariableLayout& layout, const std::string& name,
                  absl::string_view what) -> absl::StatusOr<const HostTensor*> {
    auto found = pieces.find(name);
    if (found == pieces.end()) {
      return absl::NotFoundError(
          absl::StrCat("variable '", layout.name(), "': no checkpoint part has ", what));
    }
    return &found->second;
  };
  checkpoint::Checkpoint assembled;
  for (const plan::VariableLayout& layout : plan.variables()) {
    std::vector<const HostTensor*> values;
    std::vector<std::vector<const HostTensor*>> states(layout.state_names_size());
    for (const std::string& task : layout.tasks()) {
      absl::StatusOr<const HostTensor*> value =
          find(layout, ValueName(task), absl::StrCat("task '", task, "'"));
      if (!value.ok()) return value.status();
      values.push_back(*value);
      for (int state = 0; state < layout.state_names_size(); ++state) {
        absl::StatusOr<const HostTensor*> piece =
            find(layout, StateName(state, task),
                 absl::StrCat(layout.state_names(state), " of task '", task, "'"));
        if (!piece.ok()) return piece.status();
        states[state].push_back(*piece);
      }
    }
    if (absl::Status status = AddVariableToCheckpoint(layout, values, states, &assembled);
        !status.ok()) {
      return status;
    }
  }
  return assembled;
}

}  // namespace

absl::Status CheckCheckpointPath(const std::string& path, int64_t every_steps,
                                 const plan::Plan& plan) {
  if (every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_every_steps is ", every_steps,
                                                   ": it must be >= 0 (0: only at the end)"));
  }
  if (path.empty()) {
    if (every_steps == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "checkpoint_every_steps needs a checkpoint_path: where to save the checkpoints");
  }
  const std::filesystem::path checkpoint(path);
  if (!checkpoint.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_path '", path, "' is not absolute: the daemons resolve it, not the client"));
  }
  // A client may name any path, and loomd's user may be able to write files that matter (keys,
  // configuration): loomd writes checkpoints only, never another kind of file.
  if (checkpoint.extension() != ".safetensors") {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_path '", path, "' must end in .safetensors (loomd writes no other files)"));
  }
  std::error_code error;
  if (!std::filesystem::is_directory(checkpoint.parent_path(), error)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_path '", path, "': its directory '",
                                                   checkpoint.parent_path().string(),
                                                   "' does not exist on the coordinator"));
  }
  if (plan.variables_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", plan.job_name(), "' has no variables to save at checkpoint_path"));
  }
  return absl::OkStatus();
}

std::string StepPartsPath(absl::string_view path, int64_t step) {
  return absl::StrCat(path, ".step-", step);
}

std::string CheckpointPartPath(absl::string_view parts, int node) {
  return absl::StrCat(parts, ".node-", node);
}

absl::Status WriteCheckpointPart(int node, std::map<std::string, VariableOnHost> variables,
                                 const std::string& path) {
  checkpoint::Checkpoint part;
  for (auto& [task, variable] : variables) {
    part.tensors[ValueName(task)] = std::move(variable.value);
    for (size_t state = 0; state < variable.states.size(); ++state) {
      part.tensors[StateName(static_cast<int>(state), task)] = std::move(variable.states[state]);
    }
  }
  if (absl::Status written = checkpoint::WriteSafetensors(path, part); !written.ok()) {
    return absl::Status(
        written.code(),
        absl::StrCat("node ", node, " writing its checkpoint part: ", written.message()));
  }
  return absl::OkStatus();
}

absl::Status WriteCheckpointPart(const JobRuntime& runtime, const std::string& path) {
  std::map<std::string, VariableOnHost> variables;
  for (const plan::Task& task : runtime.plan().tasks()) {
    if (task.kind() != plan::VARIABLE) continue;
    absl::StatusOr<VariableOnHost> copy = CopyVariableToHost(runtime, task.name());
    if (!copy.ok()) {
      return absl::Status(copy.status().code(),
                          absl::StrCat("node ", runtime.plan().node(),
                                       " writing its checkpoint part: ", copy.status().message()));
    }
    variables[task.name()] = *std::move(copy);
  }
  return WriteCheckpointPart(runtime.plan().node(), std::move(variables), path);
}

absl::Status AssembleCheckpointParts(const plan::Plan& plan, const std::vector<int>& nodes,
                                     absl::string_view parts, const std::string& path,
                                     const CheckpointProgress& progress) {
  absl::StatusOr<checkpoint::Checkpoint> assembled = ReadAndAssembleParts(plan, nodes, parts);
  absl::Status status = assembled.status();
  if (status.ok()) {
    AddCheckpointProgress(progress, &*assembled);
    status = checkpoint::WriteSafetensors(path, *assembled);
  }
  RemoveCheckpointParts(parts, nodes);
  return status;
}

void RemoveCheckpointParts(absl::string_view parts, const std::vector<int>& nodes) {
  for (int node : nodes) {
    const std::string part = CheckpointPartPath(parts, node);
    std::error_code error;
    std::filesystem::remove(part, error);
    if (error) LOG(WARNING) << "removing the checkpoint part " << part << ": " << error.message();
  }
}

}  // namespace loom::daemon
