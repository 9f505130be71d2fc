#include "compiler/evaluation_branch.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom::compiler {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("evaluation: ", message));
}

std::string Prefixed(const std::string& name) { return absl::StrCat(kEvaluationPrefix, name); }

// Errors for evaluation flags in a job without an evaluation.
absl::Status CheckNoFlags(const job::Job& job) {
  for (const job::Op& op : job.ops()) {
    if (op.evaluation()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op '", op.name(),
                       "' is marked evaluation, but the job has no evaluation (the compiler "
                       "marks the ops of the evaluation branch it adds; leave the flag unset)"));
    }
  }
  for (const job::Input& input : job.inputs()) {
    if (input.evaluation()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", input.name(), "' is marked evaluation, but the job has no evaluation"));
    }
  }
  return absl::OkStatus();
}

// The evaluation input replacing `input`, checked against it.
absl::StatusOr<job::Input> ReplacementOf(const job::Input& input, const job::Input& given) {
  const std::string who = absl::StrCat("input '", given.name(), "'");
  if (given.source_case() == job::Input::SOURCE_NOT_SET) return Invalid(who + " has no source");
  if (given.shape_size() > 0 && !std::equal(given.shape().begin(), given.shape().end(),
                                            input.shape().begin(), input.shape().end())) {
    return Invalid(who + " sets a shape other than the job input's (leave it unset)");
  }
  if (given.data_type() != plan::DATA_TYPE_UNSPECIFIED && given.data_type() != input.data_type()) {
    return Invalid(who + " sets a data type other than the job input's (leave it unset)");
  }
  if (given.has_placement() || given.sbp_size() > 0) {
    return Invalid(who + " sets a placement or SBP: it has the job input's (leave them unset)");
  }
  job::Input replacement = given;
  replacement.set_name(Prefixed(input.name()));
  *replacement.mutable_shape() = input.shape();
  replacement.set_data_type(input.data_type());
  if (input.has_placement()) *replacement.mutable_placement() = input.placement();
  *replacement.mutable_sbp() = input.sbp();
  replacement.set_evaluation(true);
  return replacement;
}

}  // namespace

absl::StatusOr<std::optional<job::Job>> AddEvaluationBranch(const job::Job& job) {
  if (!job.has_evaluation() || job.evaluation().every_steps() == 0) {
    if (absl::Status status = CheckNoFlags(job); !status.ok()) return status;
    if (job.has_evaluation() && job.evaluation().inputs_size() > 0) {
      return Invalid("inputs are given, but every_steps is 0 (set it to evaluate every K steps)");
    }
    return std::nullopt;
  }
  const job::Evaluation& evaluation = job.evaluation();
  if (evaluation.every_steps() < 0) {
    return Invalid(absl::StrCat("every_steps must be > 0, got ", evaluation.every_steps()));
  }
  if (absl::Status status = CheckNoFlags(job); !status.ok()) return status;
  const std::string loss = evaluation.loss().empty() ? job.loss() : evaluation.loss();
  if (loss.empty())
    return Invalid("there is no loss to evaluate (set Job.loss or evaluation.loss)");

  std::map<std::string, int> producer;  // tensor -> op index
  std::set<std::string> variables;
  std::map<std::string, const job::Input*> inputs;
  auto check_name = [](const std::string& name, const std::string& what) {
    return absl::StartsWith(name, kEvaluationPrefix)
               ? Invalid(absl::StrCat(what, " '", name, "' starts with '", kEvaluationPrefix,
                                      "', which the evaluation branch reserves"))
               : absl::OkStatus();
  };
  for (const job::Variable& variable : job.variables()) {
    if (absl::Status status = check_name(variable.name(), "variable"); !status.ok()) return status;
    variables.insert(variable.name());
  }
  for (const job::Input& input : job.inputs()) {
    if (absl::Status status = check_name(input.name(), "input"); !status.ok()) return status;
    inputs[input.name()] = &input;
  }
  for (int index = 0; index < job.ops_size(); ++index) {
    const job::Op& op = job.ops(index);
    if (absl::Status status = check_name(op.name(), "op"); !status.ok()) return status;
    for (const std::string& output : op.outputs()) {
      if (absl::Status status = check_name(output, "tensor"); !status.ok()) return status;
      producer[output] = index;
    }
  }

  // The ops and inputs the loss depends on.
  std::set<int> needed_ops;
  std::set<std::string> needed_inputs;
  std::vector<std::string> pending = {loss};
  std::set<std::string> seen;
  while (!pending.empty()) {
    const std::string tensor = pending.back();
    pending.pop_back();
    if (!seen.insert(tensor).second || variables.contains(tensor)) continue;
    if (inputs.contains(tensor)) {
      needed_inputs.insert(tensor);
      continue;
    }
    auto found = producer.find(tensor);
    if (found == producer.end()) {
      return Invalid(absl::StrCat("the evaluated loss '", loss, "' depends on '", tensor,
                                  "', which no op, input or variable of the job produces"));
    }
    if (needed_ops.insert(found->second).second) {
      for (const std::string& input : job.ops(found->second).inputs()) pending.push_back(input);
    }
  }

  job::Job result = job;
  std::set<std::string> replaced;
  for (const job::Input& given : evaluation.inputs()) {
    auto found = inputs.find(given.name());
    if (found == inputs.end()) {
      return Invalid(absl::StrCat("input '", given.name(), "' is no input of the job"));
    }
    if (!needed_inputs.contains(given.name())) {
      return Invalid(
          absl::StrCat("input '", given.name(), "' is not read by the loss '", loss, "'"));
    }
    if (!replaced.insert(given.name()).second) {
      return Invalid(absl::StrCat("input '", given.name(), "' is given twice"));
    }
    absl::StatusOr<job::Input> replacement = ReplacementOf(*found->second, given);
    if (!replacement.ok()) return replacement.status();
    *result.add_inputs() = *std::move(replacement);
  }
  for (const std::string& input : needed_inputs) {
    if (!replaced.contains(input)) {
      return Invalid(absl::StrCat("the loss '", loss, "' reads input '", input,
                                  "', which evaluation.inputs does not replace"));
    }
  }
  // Variables keep their names; every other tensor the copies read is a copy's.
  for (int index : needed_ops) {
    job::Op copy = job.ops(index);
    copy.set_name(Prefixed(copy.name()));
    for (std::string& input : *copy.mutable_inputs()) {
      if (!variables.contains(input)) input = Prefixed(input);
    }
    for (std::string& output : *copy.mutable_outputs()) output = Prefixed(output);
    copy.set_evaluation(true);
    *result.add_ops() = std::move(copy);
  }
  result.add_fetch(Prefixed(loss));
  return result;
}

void MarkEvaluationTasks(plan::Plan& plan, int64_t every_steps, int64_t first_step) {
  std::map<std::string, int> producer;                // register -> task
  std::map<std::string, std::vector<int>> consumers;  // register -> tasks
  for (int index = 0; index < plan.tasks_size(); ++index) {
    for (const std::string& output : plan.tasks(index).outputs()) producer[output] = index;
    for (const std::string& input : plan.tasks(index).inputs()) {
      consumers[input].push_back(index);
    }
  }
  std::vector<bool> marked(plan.tasks_size(), false);
  // A task fed only by marked tasks, or read only by them, is marked too: a worklist re-checks the
  // neighbours of each task marked, so the pass is linear in the plan's edges.
  auto qualifies = [&](int index) {
    const plan::Task& task = plan.tasks(index);
    if (marked[index] || task.kind() == plan::VARIABLE) return false;
    bool fed_by_marked = task.inputs_size() > 0;
    for (const std::string& input : task.inputs()) {
      auto found = producer.find(input);
      fed_by_marked = fed_by_marked && found != producer.end() && marked[found->second];
    }
    if (fed_by_marked) return true;
    bool read_by_marked = task.outputs_size() > 0;
    for (const std::string& output : task.outputs()) {
      auto found = consumers.find(output);
      if (found == consumers.end()) return false;
      for (int reader : found->second) read_by_marked = read_by_marked && marked[reader];
    }
    return read_by_marked;
  };
  std::vector<int> pending;
  for (int index = 0; index < plan.tasks_size(); ++index) {
    if (plan.tasks(index).evaluation_every_steps() > 0) {
      marked[index] = true;
      pending.push_back(index);
    }
  }
  while (!pending.empty()) {
    const plan::Task& task = plan.tasks(pending.back());
    pending.pop_back();
    std::vector<int> neighbours;
    for (const std::string& input : task.inputs()) {
      if (auto found = producer.find(input); found != producer.end()) {
        neighbours.push_back(found->second);
      }
    }
    for (const std::string& output : task.outputs()) {
      if (auto found = consumers.find(output); found != consumers.end()) {
        neighbours.insert(neighbours.end(), found->second.begin(), found->second.end());
      }
    }
    for (int neighbour : neighbours) {
      if (qualifies(neighbour)) {
        marked[neighbour] = true;
        pending.push_back(neighbour);
      }
    }
  }
  for (int index = 0; index < plan.tasks_size(); ++index) {
    if (!marked[index]) continue;
    plan.mutable_tasks(index)->set_evaluation_every_steps(every_steps);
    plan.mutable_tasks(index)->set_first_step(first_step);
  }
}

}  // namespace loom::compiler
