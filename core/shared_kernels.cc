#include "core/shared_kernels.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace loom {

const plan::KernelConf& KernelOf(const plan::Plan& plan, const plan::Task& task) {
  return task.has_kernel_index() ? plan.kernels(task.kernel_index()) : task.kernel();
}

const plan::KernelConf& InitializerOf(const plan::Plan& plan, const plan::Task& task) {
  return task.has_initializer_index() ? plan.kernels(task.initializer_index()) : task.initializer();
}

int StateInitializerCount(const plan::Task& task) {
  return task.state_initializer_indices_size() > 0 ? task.state_initializer_indices_size()
                                                   : task.state_initializers_size();
}

const plan::KernelConf& StateInitializerOf(const plan::Plan& plan, const plan::Task& task,
                                           int state) {
  return task.state_initializer_indices_size() > 0
             ? plan.kernels(task.state_initializer_indices(state))
             : task.state_initializers(state);
}

absl::Status CheckSharedKernels(const plan::Plan& plan) {
  auto check = [&](const plan::Task& task, const char* field, int position) {
    if (position >= 0 && position < plan.kernels_size()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("task '", task.name(), "': ", field, " ",
                                                   position, " is outside the plan's ",
                                                   plan.kernels_size(), " kernels"));
  };
  auto both = [](const plan::Task& task, const char* field) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task '", task.name(), "' writes its ", field,
        " both in the task and as a position in the plan's kernels; write one of the two"));
  };
  for (const plan::Task& task : plan.tasks()) {
    if (task.has_kernel_index()) {
      if (task.has_kernel()) return both(task, "kernel");
      if (absl::Status status = check(task, "kernel_index", task.kernel_index()); !status.ok()) {
        return status;
      }
    }
    if (task.has_initializer_index()) {
      if (task.has_initializer()) return both(task, "initializer");
      if (absl::Status status = check(task, "initializer_index", task.initializer_index());
          !status.ok()) {
        return status;
      }
    }
    if (task.state_initializer_indices_size() > 0 && task.state_initializers_size() > 0) {
      return both(task, "state initializers");
    }
    for (int position : task.state_initializer_indices()) {
      if (absl::Status status = check(task, "a state_initializer_indices entry", position);
          !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

void InlineSharedKernels(plan::Plan* plan) {
  if (plan->kernels_size() == 0) return;
  for (plan::Task& task : *plan->mutable_tasks()) {
    if (task.has_kernel_index()) {
      *task.mutable_kernel() = plan->kernels(task.kernel_index());
      task.clear_kernel_index();
    }
    if (task.has_initializer_index()) {
      *task.mutable_initializer() = plan->kernels(task.initializer_index());
      task.clear_initializer_index();
    }
    for (int position : task.state_initializer_indices()) {
      *task.add_state_initializers() = plan->kernels(position);
    }
    task.clear_state_initializer_indices();
  }
  plan->clear_kernels();
}

int SharedKernels::Add(plan::KernelConf kernel) {
  std::string key;
  {
    google::protobuf::io::StringOutputStream stream(&key);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    kernel.SerializeToCodedStream(&coded);
  }
  auto [entry, added] = positions_.try_emplace(std::move(key), plan_->kernels_size());
  if (added) *plan_->add_kernels() = std::move(kernel);
  return entry->second;
}

SharedKernelCopier::SharedKernelCopier(const plan::Plan& from, plan::Plan* to)
    : from_(from), to_(to), positions_(from.kernels_size(), -1) {}

int SharedKernelCopier::Copied(int position) {
  int& copied = positions_[position];
  if (copied < 0) {
    copied = to_->kernels_size();
    *to_->add_kernels() = from_.kernels(position);
  }
  return copied;
}

void SharedKernelCopier::Renumber(plan::Task* task) {
  if (task->has_kernel_index()) task->set_kernel_index(Copied(task->kernel_index()));
  if (task->has_initializer_index()) {
    task->set_initializer_index(Copied(task->initializer_index()));
  }
  for (int& position : *task->mutable_state_initializer_indices()) position = Copied(position);
}

}  // namespace loom
