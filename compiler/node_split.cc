#include "compiler/node_split.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/parallel_for.h"
#include "compiler/pieces_per_step.h"
#include "core/device_name.h"
#include "core/shared_kernels.h"

namespace loom::compiler {
namespace {

template <typename List>
void AddUnique(List& list, int value) {
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

// The network moves host memory only (Debian's UCX is built without CUDA): a register of any
// other device crosses nodes through its host, the CPU device of the same node and index.
bool IsHostMemory(const plan::Device& device) { return device.type() == plan::CPU; }

plan::Device HostOf(const plan::Device& device) {
  plan::Device host = device;
  host.set_type(plan::CPU);
  return host;
}

// Adds `host` to `node_plan`'s devices unless it is there, with the memory budget of `device`
// (the device it stages for).
void AddHostDevice(plan::Plan& node_plan, const plan::Device& host, const plan::Device& device) {
  int64_t budget = 0;
  for (const plan::DeviceDesc& desc : node_plan.devices()) {
    if (SameDevice(desc.device(), host)) return;
    if (SameDevice(desc.device(), device)) budget = desc.memory_budget_bytes();
  }
  plan::DeviceDesc* added = node_plan.add_devices();
  *added->mutable_device() = host;
  added->set_memory_budget_bytes(budget);
}

plan::Task CopyTask(std::string name, plan::Stream stream, std::string input, std::string output,
                    uint32_t index) {
  plan::Task task;
  task.set_name(std::move(name));
  task.set_kind(plan::COPY);
  *task.mutable_stream() = std::move(stream);
  task.add_inputs(std::move(input));
  task.add_outputs(std::move(output));
  task.set_index(index);
  return task;
}

// A register like `reg` named `name`, written by `producer` and read by `consumers` (when `reg`
// names its producer and consumers, as the compiler writes them; otherwise neither).
plan::RegisterDesc RegisterLike(const plan::RegisterDesc& reg, std::string name,
                                const std::string& producer,
                                const std::vector<std::string>& consumers) {
  plan::RegisterDesc result = reg;
  result.set_name(std::move(name));
  result.clear_consumers();
  if (!reg.producer().empty()) {
    result.set_producer(producer);
    for (const std::string& consumer : consumers) result.add_consumers(consumer);
  }
  return result;
}

}  // namespace

std::vector<plan::Plan> SplitByNode(const plan::Plan& plan, int threads) {
  int nodes = 1;
  for (const plan::DeviceDesc& desc : plan.devices()) {
    nodes = std::max(nodes, desc.device().node() + 1);
  }
  std::vector<plan::Plan> result(nodes);
  for (int n = 0; n < nodes; ++n) {
    result[n].set_job_name(plan.job_name());
    result[n].set_node(n);
    result[n].set_num_micro_batches(plan.num_micro_batches());
    result[n].set_host_memory_budget_bytes(plan.host_memory_budget_bytes());
  }
  for (const plan::DeviceDesc& desc : plan.devices()) {
    *result[desc.device().node()].add_devices() = desc;
  }

  // Registers are looked up by name once, for every task's inputs and outputs (edges, in task
  // order: a task's inputs, then its outputs); what follows is indexed by register position
  // (-1: a name no register declares).
  absl::flat_hash_map<absl::string_view, int> register_position;
  register_position.reserve(plan.registers_size());
  for (int r = 0; r < plan.registers_size(); ++r) {
    register_position.emplace(plan.registers(r).name(), r);
  }
  std::vector<int> edges;
  std::vector<int> first_edge(plan.tasks_size() + 1, 0);
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    first_edge[i] = static_cast<int>(edges.size());
    auto add_edge = [&](const std::string& name) {
      auto found = register_position.find(name);
      edges.push_back(found == register_position.end() ? -1 : found->second);
    };
    for (const std::string& name : task.inputs()) add_edge(name);
    for (const std::string& name : task.outputs()) add_edge(name);
  }
  first_edge[plan.tasks_size()] = static_cast<int>(edges.size());

  // Where every task runs, who produces every register, and the nodes that read it, each with
  // the position of its first task (in plan order) that does.
  absl::flat_hash_map<absl::string_view, int> node_of_task;
  node_of_task.reserve(plan.tasks_size());
  // A name no task has (the plan's validation names it) counts as node 0's.
  auto node_of = [&node_of_task](const std::string& task) {
    auto found = node_of_task.find(task);
    return found == node_of_task.end() ? 0 : found->second;
  };
  std::vector<std::vector<int>> tasks_of_node(nodes);  // positions, in plan order
  std::vector<int> producer_position(plan.registers_size(), -1);
  struct Reader {
    int node;
    int first_task;
  };
  std::vector<absl::InlinedVector<Reader, 2>> readers_of(plan.registers_size());
  uint32_t next_index = 0;
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    const int node = task.stream().device().node();
    node_of_task[task.name()] = node;
    tasks_of_node[node].push_back(i);
    next_index = std::max(next_index, TaskIndexOf(plan, i) + 1);
    const int* inputs = &edges[first_edge[i]];
    for (int input = 0; input < task.inputs_size(); ++input) {
      if (inputs[input] < 0) continue;
      absl::InlinedVector<Reader, 2>& readers = readers_of[inputs[input]];
      if (std::none_of(readers.begin(), readers.end(),
                       [&](const Reader& reader) { return reader.node == node; })) {
        readers.push_back({node, i});
      }
    }
    for (int output = 0; output < task.outputs_size(); ++output) {
      const int reg = inputs[task.inputs_size() + output];
      if (reg >= 0) producer_position[reg] = i;
    }
  }

  // A register read on another node than its producer's moves with a SEND on the producer's node
  // and a RECEIVE on the reading node, which produces the reading node's copy "<name>@node<B>";
  // through host memory (see IsHostMemory) when either side is not.
  // (node, register position) -> the name the node's tasks read.
  absl::flat_hash_map<std::pair<int, int>, std::string> renamed;
  // register -> the tasks of its producer's node that read it for other nodes (its SENDs, or the
  // copy to its host).
  absl::flat_hash_map<std::string, std::vector<std::string>> network_readers_of;
  std::vector<std::vector<plan::RegisterDesc>> added_registers(nodes);  // by the node holding each
  std::vector<std::vector<plan::Task>> network_tasks(nodes);
  for (int r = 0; r < plan.registers_size(); ++r) {
    const plan::RegisterDesc& reg = plan.registers(r);
    const int producer = producer_position[r];
    if (producer < 0 || readers_of[r].empty()) continue;
    const plan::Device& producer_device = plan.tasks(producer).stream().device();
    const int producer_node = producer_device.node();
    // The tasks moving the register act on its pieces.
    const int64_t pieces_per_step = OutputPiecesPerStep(plan.tasks(producer));
    auto add_network_task = [&](int node, plan::Task task) {
      if (pieces_per_step > 1) task.set_pieces_per_step(static_cast<int32_t>(pieces_per_step));
      network_tasks[node].push_back(std::move(task));
    };
    absl::InlinedVector<Reader, 4> remote;
    for (const Reader& reader : readers_of[r]) {
      if (reader.node != producer_node) remote.push_back(reader);
    }
    if (remote.empty()) continue;
    std::sort(remote.begin(), remote.end(),
              [](const Reader& a, const Reader& b) { return a.node < b.node; });

    // What the SENDs read: the register, or its copy in its host's memory.
    const bool stage_out = !IsHostMemory(producer_device);
    const plan::Device send_device = stage_out ? HostOf(producer_device) : producer_device;
    const std::string sent = stage_out ? absl::StrCat(reg.name(), "@host") : reg.name();
    std::string to_host;
    if (stage_out) {
      AddHostDevice(result[producer_node], send_device, producer_device);
      plan::Task copy = CopyTask(absl::StrCat("to-host:", reg.name()),
                                 NetworkStream(send_device, plan::STREAM_COPY_OUT), reg.name(),
                                 sent, next_index++);
      to_host = copy.name();
      network_readers_of[reg.name()].push_back(to_host);
      add_network_task(producer_node, std::move(copy));
    }
    std::vector<std::string> sends;
    for (const Reader& reader : remote) {
      const int node = reader.node;
      const std::string copy_name = absl::StrCat(reg.name(), "@node", node);
      // The first task of the reading node that reads the register picks the receive's device.
      const plan::Device* reader_device = &plan.tasks(reader.first_task).stream().device();
      // What the RECEIVE writes: the copy, or the copy's image in its host's memory.
      const bool stage_in = !IsHostMemory(*reader_device);
      const plan::Device receive_device = stage_in ? HostOf(*reader_device) : *reader_device;
      const std::string received = stage_in ? absl::StrCat(copy_name, "@host") : copy_name;

      plan::Task send;
      send.set_name(absl::StrCat("send:", copy_name));
      send.set_kind(plan::SEND);
      *send.mutable_stream() = NetworkStream(send_device, plan::STREAM_COPY_OUT);
      send.add_inputs(sent);
      send.set_index(next_index++);
      plan::Task receive;
      receive.set_name(absl::StrCat("receive:", copy_name));
      receive.set_kind(plan::RECEIVE);
      *receive.mutable_stream() = NetworkStream(receive_device, plan::STREAM_COPY_IN);
      receive.add_outputs(received);
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
        if (node_of(consumer) == node) copy.add_consumers(consumer);
      }
      renamed[{node, r}] = copy_name;
      sends.push_back(send.name());
      const std::string receive_name = receive.name();
      add_network_task(producer_node, std::move(send));
      add_network_task(node, std::move(receive));
      if (stage_in) {
        AddHostDevice(result[node], receive_device, *reader_device);
        plan::Task to_device = CopyTask(absl::StrCat("to-device:", copy_name),
                                        NetworkStream(*reader_device, plan::STREAM_COPY_IN),
                                        received, copy_name, next_index++);
        if (!reg.producer().empty()) copy.set_producer(to_device.name());
        added_registers[node].push_back(
            RegisterLike(reg, received, receive_name, {to_device.name()}));
        add_network_task(node, std::move(to_device));
      }
      added_registers[node].push_back(std::move(copy));
    }
    if (stage_out) {
      added_registers[producer_node].push_back(RegisterLike(reg, sent, to_host, sends));
    } else {
      network_readers_of[reg.name()] = std::move(sends);
    }
  }

  // Each node's tasks (reading the node's copies) and registers, built by one thread per node at a
  // time from what is above (read only).
  ParallelFor(nodes, threads, [&](int node) {
    plan::Plan& node_plan = result[node];
    node_plan.mutable_tasks()->Reserve(
        static_cast<int>(tasks_of_node[node].size() + network_tasks[node].size()));
    SharedKernelCopier kernel_copier(plan, &node_plan);
    // The registers the node holds: those its tasks produce or read under their own name.
    std::vector<int> held;
    for (int i : tasks_of_node[node]) {
      const plan::Task& original = plan.tasks(i);
      plan::Task* task = node_plan.add_tasks();
      *task = original;
      if (!task->has_index()) task->set_index(static_cast<uint32_t>(i));
      kernel_copier.Renumber(task);
      for (int edge = first_edge[i]; edge < first_edge[i + 1]; ++edge) {
        const int reg = edges[edge];
        if (reg < 0) continue;
        const int input = edge - first_edge[i];
        if (input < original.inputs_size() && !renamed.empty()) {
          auto copy = renamed.find(std::make_pair(node, reg));
          if (copy != renamed.end()) {
            task->set_inputs(input, copy->second);
            continue;
          }
        }
        held.push_back(reg);
      }
    }
    for (plan::Task& task : network_tasks[node]) *node_plan.add_tasks() = std::move(task);

    std::sort(held.begin(), held.end());
    held.erase(std::unique(held.begin(), held.end()), held.end());
    for (int r : held) {
      const plan::RegisterDesc& reg = plan.registers(r);
      plan::RegisterDesc* added = node_plan.add_registers();
      *added = reg;
      if (reg.consumers_size() == 0 && reg.producer().empty()) continue;
      added->clear_consumers();
      for (const std::string& consumer : reg.consumers()) {
        if (node_of(consumer) == node) added->add_consumers(consumer);
      }
      auto network_readers = network_readers_of.find(reg.name());
      if (network_readers != network_readers_of.end()) {
        for (const std::string& reader : network_readers->second) added->add_consumers(reader);
      }
    }
    for (plan::RegisterDesc& reg : added_registers[node]) {
      *node_plan.add_registers() = std::move(reg);
    }
  });

  for (const plan::Communicator& communicator : plan.communicators()) {
    absl::InlinedVector<int, 4> members;
    for (const plan::Device& device : communicator.devices()) AddUnique(members, device.node());
    for (int node : members) *result[node].add_communicators() = communicator;
  }
  for (const plan::Fetch& fetch : plan.fetches()) {
    absl::InlinedVector<int, 4> members;
    for (const std::string& sink : fetch.sinks()) AddUnique(members, node_of(sink));
    for (int node : members) *result[node].add_fetches() = fetch;
  }
  return result;
}

}  // namespace loom::compiler
