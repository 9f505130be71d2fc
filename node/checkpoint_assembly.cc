#include "node/checkpoint_assembly.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "node/fetch_assembly.h"

namespace loom {
namespace {

DistributedLayout LayoutOf(const plan::VariableLayout& variable, const std::string& what) {
  DistributedLayout layout;
  layout.what = what;
  layout.logical = variable.logical();
  layout.hierarchy.assign(variable.hierarchy().begin(), variable.hierarchy().end());
  layout.sbp.assign(variable.sbp().begin(), variable.sbp().end());
  return layout;
}

HostTensor ScalarInt64(int64_t value) {
  HostTensor tensor;
  tensor.data_type = plan::INT64;  // its shape stays the default: rank 0, a scalar
  tensor.bytes.resize(sizeof(value));
  std::memcpy(tensor.bytes.data(), &value, sizeof(value));
  return tensor;
}

}  // namespace

CheckpointProgress JobCheckpointProgress(const job::Job& job, const std::string& job_name,
                                         int64_t steps_taken) {
  CheckpointProgress progress;
  progress.steps_taken = steps_taken;
  progress.optimizer = job.optimizer().kind_case() != job::Optimizer::KIND_NOT_SET;
  progress.metadata["job"] = job_name;
  if (progress.optimizer) {
    progress.metadata["optimizer"] =
        job.optimizer().kind_case() == job::Optimizer::kAdamw ? "adamw" : "sgd";
  }
  return progress;
}

void AddCheckpointProgress(const CheckpointProgress& progress, checkpoint::Checkpoint* checkpoint) {
  if (progress.optimizer) {
    checkpoint->tensors["optimizer.step"] = ScalarInt64(progress.steps_taken);
  }
  for (const auto& [key, value] : progress.metadata) checkpoint->metadata[key] = value;
  checkpoint->metadata["step"] = absl::StrCat(progress.steps_taken);
  checkpoint->metadata["next_step"] = absl::StrCat(progress.steps_taken);
}

absl::StatusOr<HostTensor> AssembleVariableTensor(const plan::VariableLayout& layout, int state,
                                                  const std::vector<const HostTensor*>& pieces) {
  const std::string what = state < 0 ? absl::StrCat("variable '", layout.name(), "'")
                                     : absl::StrCat("optimizer state '", layout.state_names(state),
                                                    "' of variable '", layout.name(), "'");
  return AssembleLogicalTensor(LayoutOf(layout, what), pieces);
}

absl::StatusOr<std::vector<bool>> VariableRanksRead(const plan::VariableLayout& layout) {
  return RanksRead(LayoutOf(layout, absl::StrCat("variable '", layout.name(), "'")));
}

absl::Status AddVariableToCheckpoint(const plan::VariableLayout& layout,
                                     const std::vector<const HostTensor*>& values,
                                     const std::vector<std::vector<const HostTensor*>>& states,
                                     checkpoint::Checkpoint* checkpoint) {
  if (states.size() != static_cast<size_t>(layout.state_names_size())) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", layout.name(),
                                                   "': ", states.size(), " optimizer states for ",
                                                   layout.state_names_size(), " state names"));
  }
  absl::StatusOr<HostTensor> value = AssembleVariableTensor(layout, -1, values);
  if (!value.ok()) return value.status();
  checkpoint->tensors[layout.name()] = std::move(*value);
  for (size_t state = 0; state < states.size(); ++state) {
    absl::StatusOr<HostTensor> tensor =
        AssembleVariableTensor(layout, static_cast<int>(state), states[state]);
    if (!tensor.ok()) return tensor.status();
    checkpoint->tensors[layout.state_names(static_cast<int>(state))] = std::move(*tensor);
  }
  return absl::OkStatus();
}

absl::StatusOr<checkpoint::Checkpoint> AssembleCheckpoint(const plan::Plan& plan,
                                                          const JobRuntime& job,
                                                          const CheckpointProgress& progress) {
  if (plan.variables_size() == 0) {
    for (const plan::Task& task : plan.tasks()) {
      if (task.kind() == plan::VARIABLE) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the plan of job '", plan.job_name(), "' has VARIABLE tasks ('", task.name(),
            "', ...) but no variable layouts (Plan.variables): it cannot be saved; compile it "
            "with a compiler that records them"));
      }
    }
  }
  checkpoint::Checkpoint result;
  for (const plan::VariableLayout& layout : plan.variables()) {
    // Host copies of every rank's value and states; the pointers below point into them.
    std::vector<VariableOnHost> copies;
    const size_t states = static_cast<size_t>(layout.state_names_size());
    for (const std::string& task : layout.tasks()) {
      absl::StatusOr<VariableOnHost> copy = job.CopyVariableToHost(task);
      if (!copy.ok()) {
        return absl::Status(copy.status().code(), absl::StrCat("variable '", layout.name(),
                                                               "': ", copy.status().message()));
      }
      if (copy->states.size() != states) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", layout.name(), "': task '", task, "' keeps ",
                         copy->states.size(), " optimizer states but the plan names ", states));
      }
      copies.push_back(*std::move(copy));
    }
    std::vector<const HostTensor*> value_pointers;
    std::vector<std::vector<const HostTensor*>> state_pointers(states);
    for (const VariableOnHost& copy : copies) {
      value_pointers.push_back(&copy.value);
      for (size_t state = 0; state < states; ++state) {
        state_pointers[state].push_back(&copy.states[state]);
      }
    }
    if (absl::Status status =
            AddVariableToCheckpoint(layout, value_pointers, state_pointers, &result);
        !status.ok()) {
      return status;
    }
  }
  AddCheckpointProgress(progress, &result);
  return result;
}

}  // namespace loom
