#include "compiler/slot_assignment.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "core/device_name.h"

namespace loom::compiler {
namespace {

// The task writing each register, by name: views into the plan's tasks, valid while none is
// added.
using Producers = absl::flat_hash_map<absl::string_view, const plan::Task*>;

Producers ProducersOf(const plan::Plan& plan) {
  Producers producers;
  producers.reserve(plan.registers_size());
  for (const plan::Task& task : plan.tasks()) {
    for (const std::string& output : task.outputs()) producers[output] = &task;
  }
  return producers;
}

// A register read only on its producer's stream gets one slot: the stream runs one act at a
// time, so a second slot could only let the producer run a piece ahead of work it would wait
// for anyway, and would double the register's memory (every intermediate of a model on one GPU).
// Registers read on other streams, devices or nodes keep the job's slots, which let producer
// and consumers overlap. Variables have one slot already.
void SetSameStreamSlots(const Producers& producers, plan::Plan* plan) {
  absl::flat_hash_set<absl::string_view> read_elsewhere;
  for (const plan::Task& task : plan->tasks()) {
    for (const std::string& input : task.inputs()) {
      auto producer = producers.find(input);
      if (producer == producers.end() || !SameStream(producer->second->stream(), task.stream())) {
        read_elsewhere.insert(input);
      }
    }
  }
  for (plan::RegisterDesc& reg : *plan->mutable_registers()) {
    if (producers.contains(reg.name()) && !read_elsewhere.contains(reg.name())) {
      reg.set_num_slots(1);
    }
  }
}

// A register holding forward data that a backward op of stage s reads is a stashed activation;
// it gets p - s slots (one-forward-one-backward) or num_micro_batches (GPipe), so that the
// credits alone bound the micro-batches in flight on each stage. A job without pipeline stages
// is one stage: its stashed activations get one slot, as a second one could only let a forward
// run ahead of the backward that frees the first (on the device's one compute stream, it would
// buy no overlap and cost the memory of every activation again).
void SetStashSlots(const LogicalGraph& graph,
                   const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task,
                   const Producers& producer, plan::Plan* plan) {
  if (std::none_of(graph.nodes.begin(), graph.nodes.end(),
                   [](const LogicalNode& node) { return node.backward; })) {
    return;  // nothing is stashed for a backward
  }
  const bool pipelined = graph.num_stages >= 1;
  auto is_backward = [&](const plan::Task& task) {
    auto found = op_of_task.find(task.name());
    return found != op_of_task.end() && found->second->backward;
  };
  absl::flat_hash_map<absl::string_view, int> slots;
  for (const plan::Task& task : plan->tasks()) {
    if (!is_backward(task)) continue;
    const LogicalNode& node = *op_of_task.at(task.name());
    if (pipelined && !node.stage.has_value()) continue;
    const int stash = !pipelined                              ? 1
                      : graph.pipeline_schedule == job::GPIPE ? graph.num_micro_batches
                                                              : graph.num_stages - *node.stage;
    for (const std::string& input : task.inputs()) {
      auto found = producer.find(input);
      if (found == producer.end() || is_backward(*found->second)) continue;
      int& count = slots[input];
      count = std::max(count, stash);
    }
  }
  for (plan::RegisterDesc& reg : *plan->mutable_registers()) {
    auto found = slots.find(reg.name());
    // Variables keep their single slot.
    if (found != slots.end() && producer.at(reg.name())->kind() != plan::VARIABLE) {
      reg.set_num_slots(std::max(found->second, 1));
    }
  }
}

}  // namespace

void AssignRegisterSlots(const LogicalGraph& graph,
                         const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task,
                         plan::Plan* plan) {
  const Producers producers = ProducersOf(*plan);
  if (!graph.register_slots_given) SetSameStreamSlots(producers, plan);
  SetStashSlots(graph, op_of_task, producers, plan);
}

}  // namespace loom::compiler
