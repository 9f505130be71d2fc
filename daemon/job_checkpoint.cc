#include "daemon/job_checkpoint.h"

#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/safetensors.h"
#include "glog/logging.h"

namespace loom::daemon {
namespace {

std::string ValueName(absl::string_view task) { return absl::StrCat("value:", task); }

std::string StateName(int state, absl::string_view task) {
  return absl::StrCat("state", state, ":", task);
}

// Writes the checkpoint of `plan`'s variables to `path`, assembled from the parts of `nodes`
// under `parts` one logical tensor at a time: only the parts' headers and one variable's pieces
// are in memory at once.
absl::Status WriteAssembledCheckpoint(const plan::Plan& plan, const std::vector<int>& nodes,
                                      absl::string_view parts, const std::string& path,
                                      const CheckpointProgress& progress) {
  // Every part's pieces by name (value:TASK, state<i>:TASK: task names are unique in a plan).
  std::vector<std::unique_ptr<checkpoint::SafetensorsReader>> readers;
  std::map<std::string, checkpoint::SafetensorsReader*> reader_of;
  for (int node : nodes) {
    absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>> part =
        checkpoint::SafetensorsReader::Open(CheckpointPartPath(parts, node));
    if (!part.ok()) {
      return absl::Status(
          part.status().code(),
          absl::StrCat("node ", node, "'s checkpoint part: ", part.status().message()));
    }
    for (const auto& [name, info] : (*part)->tensors()) reader_of[name] = part->get();
    readers.push_back(*std::move(part));
  }
  // What the checkpoint holds: every variable and its optimizer states at their logical shapes
  // (layout, state; -1: the value), and the progress (metadata, the optimizer's step).
  checkpoint::Checkpoint progress_tensors;
  AddCheckpointProgress(progress, &progress_tensors);
  std::map<std::string, checkpoint::SafetensorsTensorInfo> tensors;
  std::map<std::string, std::pair<const plan::VariableLayout*, int>> variable_tensors;
  for (const auto& [name, tensor] : progress_tensors.tensors) {
    tensors[name] = {tensor.data_type, tensor.shape};
  }
  for (const plan::VariableLayout& layout : plan.variables()) {
    const checkpoint::SafetensorsTensorInfo info{layout.logical().data_type(),
                                                 Shape(layout.logical().shape())};
    tensors[layout.name()] = info;
    variable_tensors[layout.name()] = {&layout, -1};
    for (int state = 0; state < layout.state_names_size(); ++state) {
      tensors[layout.state_names(state)] = info;
      variable_tensors[layout.state_names(state)] = {&layout, state};
    }
  }
  auto assemble = [&](const std::string& name) -> absl::StatusOr<HostTensor> {
    if (auto found = progress_tensors.tensors.find(name); found != progress_tensors.tensors.end()) {
      return found->second;
    }
    const auto [layout, state] = variable_tensors.at(name);
    absl::StatusOr<std::vector<bool>> read = VariableRanksRead(*layout);
    if (!read.ok()) return read.status();
    std::vector<HostTensor> pieces(layout->tasks_size());
    std::vector<const HostTensor*> pointers(layout->tasks_size(), nullptr);
    for (int rank = 0; rank < layout->tasks_size(); ++rank) {
      if (rank >= static_cast<int>(read->size()) || !(*read)[rank]) continue;
      const std::string& task = layout->tasks(rank);
      const std::string piece = state < 0 ? ValueName(task) : StateName(state, task);
      auto reader = reader_of.find(piece);
      if (reader == reader_of.end()) {
        return absl::NotFoundError(
            absl::StrCat("variable '", layout->name(), "': no checkpoint part has ",
                         state < 0 ? "" : absl::StrCat(layout->state_names(state), " of "),
                         "task '", task, "'"));
      }
      absl::StatusOr<HostTensor> tensor = reader->second->ReadTensor(piece);
      if (!tensor.ok()) return tensor.status();
      pieces[rank] = *std::move(tensor);
      pointers[rank] = &pieces[rank];
    }
    return AssembleVariableTensor(*layout, state, pointers);
  };
  return checkpoint::WriteSafetensorsStreamed(path, tensors, progress_tensors.metadata, assemble);
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
    absl::StatusOr<VariableOnHost> copy = runtime.CopyVariableToHost(task.name());
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
  absl::Status status = WriteAssembledCheckpoint(plan, nodes, parts, path, progress);
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

std::vector<std::string> RemoveLeftoverCheckpointFiles(const std::string& path) {
  const std::filesystem::path checkpoint(path);
  const std::string base = checkpoint.filename().string();
  // What may follow PATH's name: a part's suffix, a temporary's, or both (never nothing).
  const std::regex leftover(R"(((\.step-[0-9]+)?\.node-[0-9]+)?(\.tmp\.[0-9]+\.[0-9]+)?)");
  std::vector<std::string> removed;
  std::error_code error;
  std::filesystem::directory_iterator entries(checkpoint.parent_path(), error);
  if (error) {
    LOG(WARNING) << "looking for the parts of checkpoint " << path << ": " << error.message();
    return removed;
  }
  for (const std::filesystem::directory_entry& entry : entries) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= base.size() || name.compare(0, base.size(), base) != 0) continue;
    if (!std::regex_match(name.begin() + static_cast<std::ptrdiff_t>(base.size()), name.end(),
                          leftover) ||
        !entry.is_regular_file(error)) {
      continue;
    }
    if (std::filesystem::remove(entry.path(), error)) {
      removed.push_back(entry.path().string());
    } else if (error) {
      LOG(WARNING) << "removing " << entry.path().string() << ": " << error.message();
    }
  }
  return removed;
}

}  // namespace loom::daemon
