#include "compiler/slot_assignment.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "compiler/ops/moe_slot_ops.h"
#include "core/device_key.h"
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

// The micro-batches that a backward op of pipeline stage `stage` keeps of what it reads (its
// stash; `deferred`: a weight gradient a zero-bubble schedule defers):
// - one-forward-one-backward: p - s of p stages; GPipe: every micro-batch;
// - interleaved (p groups of devices, v stages each): stage c p + d gets 2p - d - 1 in its first
//   round (c = 0), p - d in its last (c = v - 1) and p in between, so that group d holds
//   2(p - d - 1) + (v - 1)p + 1 stages' micro-batches, Megatron-LM's count (simulated against
//   other rules in docs/ARCHITECTURE.md, "Interleaved 1F1B"); v = 1 is plain 1F1B;
// - ZB-H1: a deferred weight gradient (W) of stage s acts s micro-batches after its input
//   gradients (SetWeightGradientLookahead), and stage s runs p - s forwards ahead of those, so what
//   W reads, forward data and output gradients alike, is held for up to p + 1 micro-batches: p + 1
//   on every stage (1F1B's first stage holds p); the rest of the stash keeps 1F1B's p - s;
// - ZB-H2: p - 1 more warm-up forwards than ZB-H1 and no lookahead: 2(p - s) - 1 on what input
//   gradients read, 2p - 1 on what weight gradients read (simulated: docs/ARCHITECTURE.md, "Zero
//   bubble");
// - ZB-V: p on every stash of its 2p stages, W's inputs included (docs/ARCHITECTURE.md, "ZB-V").
int StashSlots(const LogicalGraph& graph, int stage, bool deferred) {
  const int groups = graph.num_stages / graph.virtual_stages;
  switch (graph.pipeline_schedule) {
    case job::GPIPE:
      return graph.num_micro_batches;
    case job::ZERO_BUBBLE_V:
      return groups;
    case job::ZERO_BUBBLE:
      if (deferred) return graph.num_stages + 1;
      break;
    case job::ZERO_BUBBLE_H2:
      return deferred ? 2 * graph.num_stages - 1 : 2 * (graph.num_stages - stage) - 1;
    default:
      break;
  }
  const int round = RoundOfStage(graph, stage);
  const int group = stage % groups;
  if (round == graph.virtual_stages - 1) return groups - group;
  return round == 0 ? 2 * groups - group - 1 : groups;
}

// A register holding forward data that a backward op of stage s reads is a stashed activation;
// it gets StashSlots, so that the credits alone bound the micro-batches in flight on each stage.
// On a stage that routes tokens to experts (an moe_dispatch op), on each of its devices that
// exchanges them (`all_to_all_devices`: an all-to-all once per micro-batch), one more, at most the
// micro-batches of a step: while one micro-batch waits for its exchange on the communication
// stream, the compute stream can run another's forward (DualPipe's overlap, at its memory of
// one more micro-batch; docs/ARCHITECTURE.md, "Overlap with pipeline stages").
// A job without pipeline stages is one stage: its stashed activations get one slot, as a second
// one could only let a forward run ahead of the backward that frees the first (on the device's
// one compute stream, it would buy no overlap and cost the memory of every activation again).
void SetStashSlots(const LogicalGraph& graph,
                   const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task,
                   const absl::flat_hash_set<DeviceKey>& all_to_all_devices,
                   const Producers& producer, plan::Plan* plan) {
  if (std::none_of(graph.nodes.begin(), graph.nodes.end(),
                   [](const LogicalNode& node) { return node.backward; })) {
    return;  // nothing is stashed for a backward
  }
  const bool pipelined = graph.num_stages >= 1;
  auto node_of = [&](const plan::Task& task) -> const LogicalNode* {
    auto found = op_of_task.find(task.name());
    return found == op_of_task.end() ? nullptr : found->second;
  };
  auto is_backward = [&](const plan::Task& task) {
    const LogicalNode* node = node_of(task);
    return node != nullptr && node->backward;
  };
  absl::flat_hash_set<int> routing_stages;
  for (const LogicalNode& node : graph.nodes) {
    if (node.op_type == kMoeDispatchOpType && node.stage.has_value()) {
      routing_stages.insert(*node.stage);
    }
  }
  absl::flat_hash_map<absl::string_view, int> slots;
  for (const plan::Task& task : plan->tasks()) {
    if (!is_backward(task)) continue;
    const LogicalNode& node = *node_of(task);
    if (pipelined && !node.stage.has_value()) continue;
    const bool deferred = DefersWeightGradient(graph, node);
    int stash = pipelined ? StashSlots(graph, *node.stage, deferred) : 1;
    if (pipelined && routing_stages.contains(*node.stage) &&
        all_to_all_devices.contains(DeviceKey::Of(task.stream().device()))) {
      stash = std::min(stash + 1, graph.num_micro_batches);
    }
    for (const std::string& input : task.inputs()) {
      auto found = producer.find(input);
      if (found == producer.end() || (is_backward(*found->second) && !deferred)) continue;
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

// The op whose output `reg` carries, through the copies and boxing tasks between (their first
// input); null when it comes from a variable, a source or another task without inputs.
const LogicalNode* OriginOf(
    absl::string_view reg, const Producers& producers,
    const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task) {
  for (auto found = producers.find(reg); found != producers.end(); found = producers.find(reg)) {
    const plan::Task& task = *found->second;
    auto op = op_of_task.find(task.name());
    if (op != op_of_task.end()) return op->second;
    if (task.inputs().empty() || task.kind() == plan::VARIABLE) return nullptr;
    reg = task.inputs(0);
  }
  return nullptr;
}

// Zero bubble: stage s's weight gradients of micro-batch j wait for its input gradients of
// micro-batch j + s (Task.input_lookahead on each input an input gradient wrote), as ZB-H1 runs
// W s micro-batches behind B on stage s; stage 0 runs them right after.
void SetWeightGradientLookahead(
    const LogicalGraph& graph,
    const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task,
    const Producers& producers, plan::Plan* plan) {
  if (graph.pipeline_schedule != job::ZERO_BUBBLE || graph.num_stages < 1) return;
  for (plan::Task& task : *plan->mutable_tasks()) {
    auto found = op_of_task.find(task.name());
    if (found == op_of_task.end() || !DefersWeightGradient(graph, *found->second)) continue;
    const int stage = *found->second->stage;
    if (stage == 0) continue;
    std::vector<int32_t> lookahead(task.inputs_size(), 0);
    bool any = false;
    for (int i = 0; i < task.inputs_size(); ++i) {
      const LogicalNode* origin = OriginOf(task.inputs(i), producers, op_of_task);
      if (origin != nullptr && origin->backward && !DefersWeightGradient(graph, *origin)) {
        lookahead[i] = stage;
        any = true;
      }
    }
    if (any) *task.mutable_input_lookahead() = {lookahead.begin(), lookahead.end()};
  }
}

}  // namespace

void AssignRegisterSlots(const LogicalGraph& graph,
                         const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task,
                         const absl::flat_hash_set<DeviceKey>& all_to_all_devices,
                         plan::Plan* plan) {
  const Producers producers = ProducersOf(*plan);
  if (!graph.register_slots_given) SetSameStreamSlots(producers, plan);
  SetStashSlots(graph, op_of_task, all_to_all_devices, producers, plan);
  SetWeightGradientLookahead(graph, op_of_task, producers, plan);
}

}  // namespace loom::compiler
