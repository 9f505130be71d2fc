#include "compiler/node_split.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"

namespace loom::compiler {

std::vector<plan::Plan> SplitByNode(const plan::Plan& plan) {
  int nodes = 1;
  for (const plan::DeviceDesc& desc : plan.devices()) {
    nodes = std::max(nodes, desc.device().node() + 1);
  }
  std::vector<plan::Plan> result(nodes);
  for (int n = 0; n < nodes; ++n) {
    result[n].set_job_name(plan.job_name());
    result[n].set_node(n);
  }
  for (const plan::DeviceDesc& desc : plan.devices()) {
    *result[desc.device().node()].add_devices() = desc;
  }
  // The nodes that produce or read each register (usually one or two).
  absl::flat_hash_map<absl::string_view, absl::InlinedVector<int, 2>> register_nodes;
  register_nodes.reserve(plan.registers_size());
  absl::flat_hash_map<absl::string_view, int> node_of_task;
  node_of_task.reserve(plan.tasks_size());
  auto note = [&](absl::string_view name, int node) {
    absl::InlinedVector<int, 2>& list = register_nodes[name];
    if (std::find(list.begin(), list.end(), node) == list.end()) list.push_back(node);
  };
  std::vector<int> tasks_per_node(nodes, 0);
  for (const plan::Task& task : plan.tasks()) ++tasks_per_node[task.stream().device().node()];
  for (int n = 0; n < nodes; ++n) result[n].mutable_tasks()->Reserve(tasks_per_node[n]);
  for (const plan::Task& task : plan.tasks()) {
    int node = task.stream().device().node();
    node_of_task[task.name()] = node;
    *result[node].add_tasks() = task;
    for (const std::string& name : task.inputs()) note(name, node);
    for (const std::string& name : task.outputs()) note(name, node);
  }
  for (const plan::RegisterDesc& reg : plan.registers()) {
    auto found = register_nodes.find(reg.name());
    if (found == register_nodes.end()) continue;
    for (int node : found->second) *result[node].add_registers() = reg;
  }
  for (const plan::Communicator& communicator : plan.communicators()) {
    absl::InlinedVector<int, 4> members;
    for (const plan::Device& device : communicator.devices()) {
      if (std::find(members.begin(), members.end(), device.node()) == members.end()) {
        members.push_back(device.node());
      }
    }
    for (int node : members) *result[node].add_communicators() = communicator;
  }
  for (const plan::Fetch& fetch : plan.fetches()) {
    absl::InlinedVector<int, 4> members;
    for (const std::string& sink : fetch.sinks()) {
      int node = node_of_task[sink];
      if (std::find(members.begin(), members.end(), node) == members.end()) members.push_back(node);
    }
    for (int node : members) *result[node].add_fetches() = fetch;
  }
  return result;
}

}  // namespace loom::compiler
