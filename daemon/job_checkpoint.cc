#include "daemon/job_checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

bool WrittenBy(const WritableDirectory& directory, const std::string& writer);

std::string ValueName(absl::string_view task) { return absl::StrCat("value:", task); }

std::string StateName(int state, absl::string_view task) {
  return absl::StrCat("state", state, ":", task);
}

// Writes the checkpoint of `plan`'s variables to `path`, assembled from the parts of `nodes`
// under `parts` one logical tensor at a time: only the parts' headers and one variable's pieces
// are in memory at once.
absl::Status WriteAssembledCheckpoint(const FileRoots& roots, const plan::Plan& plan,
                                      const std::vector<int>& nodes, absl::string_view parts,
                                      const std::string& path, const CheckpointProgress& progress,
                                      bool overwrite) {
  absl::StatusOr<WritableDirectory> directory = roots.OpenForWriting(path);
  if (!directory.ok()) return directory.status();
  // Every part's pieces by name (value:TASK, state<i>:TASK: task names are unique in a plan).
  std::vector<std::unique_ptr<checkpoint::SafetensorsReader>> readers;
  std::map<std::string, checkpoint::SafetensorsReader*> reader_of;
  for (int node : nodes) {
    absl::StatusOr<ReadableFile> file = roots.OpenForReading(CheckpointPartPath(parts, node));
    absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>> part =
        file.ok() ? checkpoint::SafetensorsReader::Open(*std::move(file))
                  : absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>>(file.status());
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
  const auto writer = progress.metadata.find(kWriterKey);
  const checkpoint::ExistingFile existing =
      overwrite || (writer != progress.metadata.end() && !writer->second.empty() &&
                    WrittenBy(*directory, writer->second))
          ? checkpoint::ExistingFile::kReplace
          : checkpoint::ExistingFile::kKeep;
  absl::Status status = checkpoint::WriteSafetensorsStreamed(
      *directory, tensors, progress_tensors.metadata, assemble, existing);
  if (status.code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError(
        absl::StrCat(status.message(),
                     ": this job did not write it, and was not submitted with "
                     "overwrite_checkpoint"));
  }
  return status;
}

// Whether the file directory.name() in `directory` is a regular file (not a symlink) and a
// checkpoint whose metadata kWriterKey is `writer`.
bool WrittenBy(const WritableDirectory& directory, const std::string& writer) {
  const int descriptor = ::openat(directory.descriptor(), directory.name().c_str(),
                                  O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (descriptor < 0) return false;
  struct stat info;
  if (::fstat(descriptor, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(descriptor);
    return false;
  }
  absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>> reader =
      checkpoint::SafetensorsReader::Open(
          ReadableFile(descriptor, static_cast<int64_t>(info.st_size), directory.name()));
  if (!reader.ok()) return false;
  const auto found = (*reader)->metadata().find(kWriterKey);
  return found != (*reader)->metadata().end() && found->second == writer;
}

// Whether `part` is PATH.node-N or PATH.step-K.node-N, PATH ending in ".safetensors".
bool IsPartName(const std::string& part) {
  const std::regex pattern(R"(.+\.safetensors(\.step-[0-9]+)?\.node-[0-9]+)");
  return std::regex_match(part, pattern);
}

}  // namespace

std::string CheckpointWriter(absl::string_view job_id, absl::string_view submit_time) {
  return absl::StrCat(job_id, " submitted ", submit_time);
}

absl::Status CheckCheckpointPath(const FileRoots* roots, const std::string& path,
                                 int64_t every_steps, bool overwrite, const plan::Plan& plan) {
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
  if (roots == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint_path '", path,
                     "' is refused: this coordinator writes no checkpoints (no --checkpoint-root "
                     "given)"));
  }
  if (absl::Status beneath = roots->CheckBeneath(path); !beneath.ok()) {
    return absl::Status(beneath.code(), absl::StrCat("checkpoint_path: ", beneath.message()));
  }
  absl::StatusOr<WritableDirectory> directory = roots->OpenForWriting(path);
  if (!directory.ok()) {
    if (directory.status().code() == absl::StatusCode::kPermissionDenied) {
      return absl::Status(directory.status().code(),
                          absl::StrCat("checkpoint_path: ", directory.status().message()));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_path '", path, "': its directory '", checkpoint.parent_path().string(),
        "' does not exist on the coordinator (", directory.status().message(), ")"));
  }
  struct stat existing;
  if (::fstatat(directory->descriptor(), directory->name().c_str(), &existing,
                AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(existing.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint_path '", path, "' is a directory"));
    }
    if (!overwrite) {
      return absl::AlreadyExistsError(absl::StrCat(
          "checkpoint_path '", path,
          "' already exists: submit with overwrite_checkpoint to replace it, or choose another "
          "path"));
    }
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

absl::Status CheckCheckpointPartPath(const FileRoots& roots, const std::string& part) {
  if (part.empty() || part[0] != '/' || !IsPartName(part)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", part,
                     "' is no checkpoint part's path (PATH.node-N or PATH.step-K.node-N, PATH an "
                     "absolute path ending in .safetensors)"));
  }
  return roots.CheckBeneath(part);
}

absl::Status WriteCheckpointPart(int node, std::map<std::string, VariableOnHost> variables,
                                 const FileRoots& roots, const std::string& path) {
  auto failed = [&](const absl::Status& status) {
    return absl::Status(
        status.code(),
        absl::StrCat("node ", node, " writing its checkpoint part: ", status.message()));
  };
  if (absl::Status checked = CheckCheckpointPartPath(roots, path); !checked.ok()) {
    return failed(checked);
  }
  absl::StatusOr<WritableDirectory> directory = roots.OpenForWriting(path);
  if (!directory.ok()) return failed(directory.status());
  checkpoint::Checkpoint part;
  for (auto& [task, variable] : variables) {
    part.tensors[ValueName(task)] = std::move(variable.value);
    for (size_t state = 0; state < variable.states.size(); ++state) {
      part.tensors[StateName(static_cast<int>(state), task)] = std::move(variable.states[state]);
    }
  }
  if (absl::Status written =
          checkpoint::WriteSafetensors(*directory, part, checkpoint::ExistingFile::kReplace);
      !written.ok()) {
    return failed(written);
  }
  return absl::OkStatus();
}

absl::Status WriteCheckpointPart(const JobRuntime& runtime, const FileRoots& roots,
                                 const std::string& path) {
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
  return WriteCheckpointPart(runtime.plan().node(), std::move(variables), roots, path);
}

absl::Status AssembleCheckpointParts(const FileRoots& roots, const plan::Plan& plan,
                                     const std::vector<int>& nodes, absl::string_view parts,
                                     const std::string& path, const CheckpointProgress& progress,
                                     bool overwrite) {
  absl::Status status =
      WriteAssembledCheckpoint(roots, plan, nodes, parts, path, progress, overwrite);
  RemoveCheckpointParts(roots, parts, nodes);
  return status;
}

void RemoveCheckpointParts(const FileRoots& roots, absl::string_view parts,
                           const std::vector<int>& nodes) {
  for (int node : nodes) {
    const std::string part = CheckpointPartPath(parts, node);
    absl::StatusOr<WritableDirectory> directory = roots.OpenForWriting(part);
    if (!directory.ok()) {
      LOG(WARNING) << "removing the checkpoint part " << part << ": " << directory.status();
      continue;
    }
    if (::unlinkat(directory->descriptor(), directory->name().c_str(), 0) != 0 && errno != ENOENT) {
      LOG(WARNING) << "removing the checkpoint part " << part << ": " << std::strerror(errno);
    }
  }
}

std::vector<std::string> RemoveLeftoverCheckpointFiles(const FileRoots* roots,
                                                       const std::string& path) {
  std::vector<std::string> removed;
  if (roots == nullptr) return removed;
  absl::StatusOr<WritableDirectory> directory = roots->OpenForWriting(path);
  if (!directory.ok()) {
    LOG(WARNING) << "looking for the parts of checkpoint " << path << ": " << directory.status();
    return removed;
  }
  const std::string& base = directory->name();
  // What may follow PATH's name: a part's suffix, a temporary's, or both (never nothing).
  const std::regex leftover(R"(((\.step-[0-9]+)?\.node-[0-9]+)?(\.tmp\.[0-9]+\.[0-9]+)?)");
  // The directory's entries, read through a descriptor of its own (closedir closes it).
  const int listing = ::openat(directory->descriptor(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* entries = listing < 0 ? nullptr : ::fdopendir(listing);
  if (entries == nullptr) {
    LOG(WARNING) << "looking for the parts of checkpoint " << path << ": " << std::strerror(errno);
    if (listing >= 0) ::close(listing);
    return removed;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(entries)) names.emplace_back(entry->d_name);
  ::closedir(entries);
  for (const std::string& name : names) {
    if (name.size() <= base.size() || name.compare(0, base.size(), base) != 0) continue;
    if (!std::regex_match(name.begin() + static_cast<std::ptrdiff_t>(base.size()), name.end(),
                          leftover)) {
      continue;
    }
    struct stat info;
    if (::fstatat(directory->descriptor(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(info.st_mode)) {
      continue;
    }
    const std::string full = (std::filesystem::path(directory->directory()) / name).string();
    if (::unlinkat(directory->descriptor(), name.c_str(), 0) == 0) {
      removed.push_back(full);
    } else if (errno != ENOENT) {
      LOG(WARNING) << "removing " << full << ": " << std::strerror(errno);
    }
  }
  return removed;
}

}  // namespace loom::daemon
