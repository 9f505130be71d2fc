#ifndef LOOM_CORE_SHARED_KERNELS_H_
#define LOOM_CORE_SHARED_KERNELS_H_

// Kernel configurations held once in Plan.kernels and named by position from the tasks that share
// them: the accessors (KernelOf, InitializerOf, StateInitializerOf), CheckSharedKernels,
// InlineSharedKernels (the form actors read), SharedKernels (collects them for a plan writer) and
// SharedKernelCopier (carries them into node plans when a plan is split).

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "proto/plan.pb.h"

namespace loom {

// A task's kernels (Task.kernel, .initializer, .state_initializers) are written either in the task
// or, held once for all the tasks that share them, in Plan.kernels, where the task names their
// positions (Task.kernel_index, .initializer_index, .state_initializer_indices).

// A task's kernel, initializer and state initializers, in whichever form the task writes them.
// The plan must have passed CheckSharedKernels.
const plan::KernelConf& KernelOf(const plan::Plan& plan, const plan::Task& task);
const plan::KernelConf& InitializerOf(const plan::Plan& plan, const plan::Task& task);
int StateInitializerCount(const plan::Task& task);
const plan::KernelConf& StateInitializerOf(const plan::Plan& plan, const plan::Task& task,
                                           int state);

// INVALID_ARGUMENT naming the task when one of its positions is outside Plan.kernels or it writes
// a kernel in both forms.
absl::Status CheckSharedKernels(const plan::Plan& plan);

// Writes every task's kernels into the task and clears Plan.kernels: the form actors read. The
// plan must have passed CheckSharedKernels.
void InlineSharedKernels(plan::Plan* plan);

// Collects distinct kernel configurations into a plan's kernels, for a writer of plans.
class SharedKernels {
 public:
  explicit SharedKernels(plan::Plan* plan) : plan_(plan) {}

  // The position in Plan.kernels of a configuration equal to `kernel`, added when there is none.
  int Add(plan::KernelConf kernel);

 private:
  plan::Plan* plan_;
  // Position by deterministic serialization (map attributes in key order).
  absl::flat_hash_map<std::string, int> positions_;
};

// Copies the kernels a task of `from` names into `to` (each once, however many tasks name it),
// and makes the task's positions point there: for splitting a plan into node plans.
class SharedKernelCopier {
 public:
  SharedKernelCopier(const plan::Plan& from, plan::Plan* to);

  void Renumber(plan::Task* task);

 private:
  int Copied(int position);

  const plan::Plan& from_;
  plan::Plan* to_;
  // Position in `to` by position in `from`; -1: not copied yet.
  std::vector<int> positions_;
};

}  // namespace loom

#endif  // LOOM_CORE_SHARED_KERNELS_H_
