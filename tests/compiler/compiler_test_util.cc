#include "tests/compiler/compiler_test_util.h"

#include "glog/logging.h"
#include "google/protobuf/text_format.h"

namespace loom::compiler::testing {

job::Job ParseJob(const std::string& text) {
  job::Job job;
  CHECK(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

const OpRegistry& StandardOps() {
  static const OpRegistry* registry = [] {
    auto* result = new OpRegistry();
    absl::Status status = RegisterStandardOps(result);
    CHECK(status.ok()) << status;
    return result;
  }();
  return *registry;
}

absl::StatusOr<CompileResult> CompileOn(const job::Job& job, int cpus, int nodes) {
  return Compile(job, StandardOps(), DeviceSet::Cpus(cpus, nodes));
}

std::vector<const plan::Task*> TasksOfKind(const plan::Plan& plan, plan::TaskKind kind) {
  std::vector<const plan::Task*> tasks;
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() == kind) tasks.push_back(&task);
  }
  return tasks;
}

const plan::Task* TaskNamed(const plan::Plan& plan, const std::string& name) {
  for (const plan::Task& task : plan.tasks()) {
    if (task.name() == name) return &task;
  }
  return nullptr;
}

std::map<std::string, int> SlotsOf(const plan::Plan& plan) {
  std::map<std::string, int> slots;
  for (const plan::RegisterDesc& reg : plan.registers()) slots[reg.name()] = reg.num_slots();
  return slots;
}

std::vector<const plan::Task*> Collectives(const plan::Plan& plan, plan::CollectiveKind kind) {
  std::vector<const plan::Task*> tasks;
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() == plan::COLLECTIVE && task.collective().kind() == kind) tasks.push_back(&task);
  }
  return tasks;
}

std::string SbpOf(const CompileResult& result, const std::string& tensor) {
  auto found = result.graph.tensor_by_name.find(tensor);
  CHECK(found != result.graph.tensor_by_name.end()) << tensor;
  return NdSbpToString(result.graph.tensors[found->second].sbp);
}

}  // namespace loom::compiler::testing
