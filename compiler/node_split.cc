#include "compiler/node_split.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace loom::compiler {
namespace {

void AddUnique(absl::InlinedVector<int, 4>& list, int value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

plan::Stream NetworkStream(const plan::Device& device, plan::StreamKind kind) {
  plan::Stream stream;
  *stream.mutable_device() = device;
  stream.set_kind(kind);
  return stream;
}

uint32_t TaskIndexOf(const plan::Plan& plan, int position) {
  const plan::Task& task = plan.tasks(position);
  return task.has_index() ? task.index() : static_cast<uint32_t>(position);
}

}  // namespace

std::vector<plan::Plan> SplitByNode(const plan::Plan& plan) {
  int nodes = 1;
  for (const plan::DeviceDesc& desc : plan.devices()) {
    nodes = std::max(nodes, desc.device().node() + 1);
  }
  std::vector<plan::Plan> result(nodes);
  for (int n = 0; n < nodes; ++n) {
    result[n].set_job_name(plan.job_name());
    result[n].set_node(n);
    result[n].set_num_micro_batches(plan.num_micro_batches());
  }
  for (const plan::DeviceDesc& desc : plan.devices()) {
    *result[desc.device().node()].add_devices() = desc;
  }

  // Where every task runs, who produces every register, and the nodes that read it.
  absl::flat_hash_map<absl::string_view, int> node_of_task;
  node_of_task.reserve(plan.tasks_size());
  absl::flat_hash_map<absl::string_view, int> producer_position;
  absl::flat_hash_map<absl::string_view, absl::InlinedVector<int, 4>> reader_nodes;
  uint32_t next_index = 0;
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    const int node = task.stream().device().node();
    node_of_task[task.name()] = node;
    next_index = std::max(next_index, TaskIndexOf(plan, i) + 1);
    for (const std::string& name : task.outputs()) producer_position[name] = i;
    for (const std::string& name : task.inputs()) AddUnique(reader_nodes[name], node);
  }

  // A register read on another node than its producer's moves with a SEND on the producer's node
  // and a RECEIVE on the reading node, which produces the reading node's copy "<name>@node<B>".
  // (node, register) -> the name the node's tasks read.
  std::map<std::pair<int, std::string>, std::string> renamed;
  // register -> its SEND tasks (consumers on the producer's node).
  absl::flat_hash_map<std::string, std::vector<std::string>> sends_of;
  std::vector<plan::RegisterDesc> received;  // the copies, with the node that holds each
  std::vector<int> received_node;
  std::vector<std::pair<int, plan::Task>> network_tasks;
  for (const plan::RegisterDesc& reg : plan.registers()) {
    auto producer = producer_position.find(reg.name());
    auto readers = reader_nodes.find(reg.name());
    if (producer == producer_position.end() || readers == reader_nodes.end()) continue;
    const plan::Task& producer_task = plan.tasks(producer->second);
    const int producer_node = producer_task.stream().device().node();
    absl::InlinedVector<int, 4> remote = readers->second;
    std::sort(remote.begin(), remote.end());
    for (int node : remote) {
      if (node == producer_node) continue;
      const std::string copy_name = absl::StrCat(reg.name(), "@node", node);
      // The first task of the reading node that reads the register picks the receive's device.
      const plan::Device* reader_device = nullptr;
      for (const plan::Task& task : plan.tasks()) {
        if (task.stream().device().node() != node) continue;
        if (std::find(task.inputs().begin(), task.inputs().end(), reg.name()) !=
            task.inputs().end()) {
          reader_device = &task.stream().device();
          break;
        }
      }
      plan::Task send;
      send.set_name(absl::StrCat("send:", copy_name));
      send.set_kind(plan::SEND);
      *send.mutable_stream() =
          NetworkStream(producer_task.stream().device(), plan::STREAM_COPY_OUT);
      send.add_inputs(reg.name());
      send.set_index(next_index++);
      plan::Task receive;
      receive.set_name(absl::StrCat("receive:", copy_name));
      receive.set_kind(plan::RECEIVE);
      *receive.mutable_stream() = NetworkStream(*reader_device, plan::STREAM_COPY_IN);
      receive.add_outputs(copy_name);
      receive.set_index(next_index++);
      send.mutable_peer()->set_task(receive.name());
      *send.mutable_peer()->mutable_stream() = receive.stream();
      send.mutable_peer()->set_index(receive.index());
      receive.mutable_peer()->set_task(send.name());
      *receive.mutable_peer()->mutable_stream() = send.stream();
      receive.mutable_peer()->set_index(send.index());

      plan::RegisterDesc copy = reg;
      copy.set_name(copy_name);
      if (!reg.producer().empty()) copy.set_producer(receive.name());
      copy.clear_consumers();
      for (const std::string& consumer : reg.consumers()) {
        if (node_of_task[consumer] == node) copy.add_consumers(consumer);
      }
      received.push_back(std::move(copy));
      received_node.push_back(node);
      renamed[{node, reg.name()}] = copy_name;
      sends_of[reg.name()].push_back(send.name());
      network_tasks.emplace_back(producer_node, std::move(send));
      network_tasks.emplace_back(node, std::move(receive));
    }
  }

  // Tasks, reading the node's copies.
  std::vector<int> tasks_per_node(nodes, 0);
  for (const plan::Task& task : plan.tasks()) ++tasks_per_node[task.stream().device().node()];
  for (const auto& [node, task] : network_tasks) ++tasks_per_node[node];
  for (int n = 0; n < nodes; ++n) result[n].mutable_tasks()->Reserve(tasks_per_node[n]);
  // The registers each node holds: those its tasks produce or read under their own name.
  std::vector<absl::flat_hash_map<std::string, bool>> holds(nodes);
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const int node = plan.tasks(i).stream().device().node();
    plan::Task* task = result[node].add_tasks();
    *task = plan.tasks(i);
    if (!task->has_index()) task->set_index(static_cast<uint32_t>(i));
    for (std::string& name : *task->mutable_inputs()) {
      auto copy = renamed.find({node, name});
      if (copy != renamed.end()) {
        name = copy->second;
      } else {
        holds[node][name] = true;
      }
    }
    for (const std::string& name : task->outputs()) holds[node][name] = true;
  }
  for (auto& [node, task] : network_tasks) *result[node].add_tasks() = std::move(task);

  for (const plan::RegisterDesc& reg : plan.registers()) {
    for (int n = 0; n < nodes; ++n) {
      if (!holds[n].contains(reg.name())) continue;
      plan::RegisterDesc* added = result[n].add_registers();
      *added = reg;
      auto sends = sends_of.find(reg.name());
      if (reg.consumers_size() == 0 && reg.producer().empty()) continue;
      added->clear_consumers();
      for (const std::string& consumer : reg.consumers()) {
        if (node_of_task[consumer] == n) added->add_consumers(consumer);
      }
      if (sends != sends_of.end()) {
        for (const std::string& send : sends->second) added->add_consumers(send);
      }
    }
  }
  for (size_t i = 0; i < received.size(); ++i) {
    *result[received_node[i]].add_registers() = std::move(received[i]);
  }

  for (const plan::Communicator& communicator : plan.communicators()) {
    absl::InlinedVector<int, 4> members;
    for (const plan::Device& device : communicator.devices()) AddUnique(members, device.node());
    for (int node : members) *result[node].add_communicators() = communicator;
  }
  for (const plan::Fetch& fetch : plan.fetches()) {
    absl::InlinedVector<int, 4> members;
    for (const std::string& sink : fetch.sinks()) AddUnique(members, node_of_task[sink]);
    for (int node : members) *result[node].add_fetches() = fetch;
  }
  for (const plan::VariableLayout& variable : plan.variables()) {
    absl::InlinedVector<int, 4> members;
    for (const std::string& task : variable.tasks()) AddUnique(members, node_of_task[task]);
    for (int node : members) *result[node].add_variables() = variable;
  }
  return result;
}

}  // namespace loom::compiler
