#include "compiler/pieces_per_step.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "core/plan_steps.h"

namespace loom::compiler {

int64_t OutputPiecesPerStep(const plan::Task& task) {
  return task.kind() == plan::ACCUMULATE ? 1 : PiecesPerStep(task);
}

void SetPiecesPerStep(plan::Plan& plan) {
  if (plan.num_micro_batches() <= 1) return;
  absl::flat_hash_map<absl::string_view, int> producer;
  producer.reserve(plan.registers_size());
  for (int i = 0; i < plan.tasks_size(); ++i) {
    for (const std::string& name : plan.tasks(i).outputs()) producer[name] = i;
  }
  // A task's pieces are its first input's (what it acts on), except for the tasks that start a
  // step's micro-batches (UNPACK, REPEAT: their outputs') and those that act once per step
  // whatever they read (VARIABLE: its gradient is the previous step's) or read nothing.
  // Resolved producer first, without recursion (plans have long chains).
  enum class State : char { kUnknown, kVisiting, kKnown };
  std::vector<State> state(plan.tasks_size(), State::kUnknown);
  auto DependsOn = [&](const plan::Task& task) -> int {
    if (task.kind() == plan::UNPACK || task.kind() == plan::REPEAT ||
        task.kind() == plan::VARIABLE || task.inputs().empty()) {
      return -1;
    }
    auto found = producer.find(task.inputs(0));
    return found == producer.end() ? -1 : found->second;
  };
  std::vector<int> stack;
  for (int root = 0; root < plan.tasks_size(); ++root) {
    if (state[root] != State::kUnknown) continue;
    stack.push_back(root);
    while (!stack.empty()) {
      const int position = stack.back();
      plan::Task& task = *plan.mutable_tasks(position);
      const int dependency = DependsOn(task);
      if (dependency >= 0 && state[dependency] == State::kUnknown) {
        state[position] = State::kVisiting;
        state[dependency] = State::kVisiting;
        stack.push_back(dependency);
        continue;
      }
      int64_t pieces = 1;
      if (task.kind() == plan::UNPACK || task.kind() == plan::REPEAT) {
        pieces = task.factor();
      } else if (dependency >= 0 && state[dependency] == State::kKnown) {
        pieces = OutputPiecesPerStep(plan.tasks(dependency));
      }
      if (pieces > 1) task.set_pieces_per_step(static_cast<int32_t>(pieces));
      state[position] = State::kKnown;
      stack.pop_back();
    }
  }
}

}  // namespace loom::compiler
