#ifndef LOOM_COMPILER_LOGICAL_GRAPH_H_
#define LOOM_COMPILER_LOGICAL_GRAPH_H_

// The logical graph that the compiler's passes work on: LogicalNode (a variable, input or op with
// its placement, SBP hints and, once inferred, SBPs), LogicalTensor, and LogicalGraph, the whole
// job in topological order with its step, micro-batch and pipeline settings. BuildLogicalGraph
// builds it from a job (passes 1 and 2). Also DeviceSet, the devices a job is compiled for, and
// IndexedDeviceSet, the same set indexed for membership checks.

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/placement.h"
#include "compiler/sbp.h"
#include "core/device_key.h"
#include "core/learning_rate_schedule.h"
#include "proto/job.pb.h"

namespace loom::compiler {

struct LogicalTensor {
  std::string name;
  TensorType type;
  int producer = -1;  // node index
  int producer_output = 0;
  // Set by SBP inference (variables and inputs: from the job).
  NdSbp sbp;
};

struct LogicalNode {
  enum class Kind { kVariable, kInput, kOp };

  Kind kind = Kind::kOp;
  std::string name;
  // Ops: the op type and its definition; variables and inputs: empty.
  std::string op_type;
  const OpDefinition* definition = nullptr;
  // Exactly one of these points into the job.
  const job::Op* op = nullptr;
  const job::Variable* variable = nullptr;
  const job::Input* input = nullptr;

  std::vector<int> inputs;   // tensor ids
  std::vector<int> outputs;  // tensor ids
  Placement placement;
  // Ops: one per output (empty: free).
  std::vector<std::optional<NdSbp>> output_hints;
  std::optional<int> stage;
  // Ops: added by autodiff (acts before ready forward ops); runs once per step rather than once
  // per micro-batch.
  bool backward = false;
  // Backward ops: only variables' gradients depend on it (Op.weight_gradient).
  bool weight_gradient = false;
  bool once_per_step = false;
  // Ops and inputs of the evaluation branch (Op.evaluation, Input.evaluation): their tasks work
  // only in the evaluation steps.
  bool evaluation = false;
  // A recomputed copy (Op.recomputes): the node of the forward op it recomputes, earlier in the
  // order, whose SBP signature it takes; -1 otherwise.
  int recomputes = -1;
  OpContext context;

  // Set by SBP inference: what the chosen signature needs of each input.
  std::vector<NdSbp> input_sbp;

  // Variables of a training job: the tensor holding this variable's gradient ("grad/<name>"),
  // or -1 when it is not updated (no optimizer, frozen, or no gradient).
  int gradient = -1;
  // Variables of a training job: the position of its group in Job.optimizer.parameter_groups,
  // or -1 for none.
  int parameter_group = -1;
  // Variables that ZeRO stage 3 split (compiler/zero_sharding.h), and the once-per-step forward
  // ops computed from those alone (a weight's bfloat16 copy): each op reading one's output gets
  // its own gather of it, so that no gathered copy outlives its use.
  bool gathered_per_use = false;
};

// The job as a graph of logical ops over logical tensors, in topological order.
struct LogicalGraph {
  std::string job_name;
  std::vector<LogicalNode> nodes;
  std::vector<LogicalTensor> tensors;
  absl::flat_hash_map<std::string, int> tensor_by_name;
  std::vector<int> fetches;  // tensor ids
  // Job.summed_fetches: tensor ids, each also in `fetches`.
  std::vector<int> summed_fetches;
  int64_t num_steps = 1;
  // Job.register_slots with its default applied; `register_slots_given`: the job set it.
  int32_t register_slots = 2;
  bool register_slots_given = false;
  int64_t device_memory_budget_bytes = 0;
  // Job.host_memory_budget_bytes (0: none).
  int64_t host_memory_budget_bytes = 0;
  // Job.gradient_bucket_bytes with its default applied (<= 0: no buckets).
  int64_t gradient_bucket_bytes = 0;
  // Set when the job trains.
  const job::Optimizer* optimizer = nullptr;
  // Set when the job trains: the optimizer's learning-rate schedule, checked.
  LearningRateSchedule learning_rate_schedule;
  // Micro-batches per step (inputs' logical shapes are a micro-batch's: the batch axis divided
  // by it), the number of pipeline stages that ops use (0: no pipeline) and the schedule.
  int32_t num_micro_batches = 1;
  int32_t num_stages = 0;
  job::PipelineSchedule pipeline_schedule = job::ONE_F_ONE_B;
  // Stages on each group of devices (compiler/pipeline_rounds.h): v of an INTERLEAVED pipeline,
  // 2 of a ZERO_BUBBLE_V one (num_stages / v groups), 1 otherwise.
  int32_t virtual_stages = 1;
  // Where variables start from; nullptr: their initializers.
  const job::InitialState* initial_state = nullptr;
  // Job.evaluation.every_steps (0: no evaluation), and the step of piece 0 (a resumed job's).
  int64_t evaluation_every_steps = 0;
  int64_t first_step = 0;

  const LogicalTensor& tensor(int id) const { return tensors[id]; }
  // Whether tensor `id` is made once a step (by a variable or a once-per-step op), not once per
  // micro-batch.
  bool PerStep(int id) const {
    const LogicalNode& producer = nodes[tensors[id].producer];
    return producer.kind == LogicalNode::Kind::kVariable || producer.once_per_step;
  }
};

// The devices a job may use (loomctl compile --devices cpu:N [--nodes K]).
struct DeviceSet {
  std::vector<plan::Device> devices;
  // Each device's own memory budget (a cluster node's --memory-budget-per-device), by position in
  // `devices`; 0 or missing: none. A device's plan budget is the tighter of this and the job's.
  std::vector<int64_t> memory_budget_bytes;
  // The budget of devices[position]: memory_budget_bytes[position] if there is one, else 0.
  int64_t MemoryBudget(size_t position) const;
  // Each node's budget for host memory (a cluster node's --host-memory-budget), by node index;
  // 0 or missing: none.
  std::vector<int64_t> host_memory_budget_bytes;
  // The least of the nodes' host memory budgets that are set; 0 when none is.
  int64_t HostMemoryBudget() const;
  // "cpu:0..3 on 1 node".
  std::string ToString() const;
  // N CPU devices spread evenly over K nodes (node k gets devices k*N/K...); each node numbers
  // its devices from 0.
  static DeviceSet Cpus(int count, int nodes);
};

// A DeviceSet with its devices indexed, for checking every device of every placement of a job in
// constant time each. Refers to the set, which must outlive it and not change meanwhile.
class IndexedDeviceSet {
 public:
  explicit IndexedDeviceSet(const DeviceSet& devices);
  const DeviceSet& devices() const { return devices_; }
  bool Contains(const plan::Device& device) const { return keys_.contains(DeviceKey::Of(device)); }

 private:
  const DeviceSet& devices_;
  absl::flat_hash_set<DeviceKey> keys_;
};

// The round of pipeline stage `stage` (0 .. v - 1, v = graph.virtual_stages): stage k of p v is in
// round k / p, whether the groups hold their stages round-robin or V-shaped.
inline int RoundOfStage(const LogicalGraph& graph, int stage) {
  return stage / (graph.num_stages / graph.virtual_stages);
}

// Whether a zero-bubble pipeline (job.ZERO_BUBBLE, ZERO_BUBBLE_H2, ZERO_BUBBLE_V) defers `node`: a
// weight gradient of a pipeline stage, acting once per micro-batch (docs/ARCHITECTURE.md, "Zero
// bubble").
inline bool DefersWeightGradient(const LogicalGraph& graph, const LogicalNode& node) {
  return (graph.pipeline_schedule == job::ZERO_BUBBLE ||
          graph.pipeline_schedule == job::ZERO_BUBBLE_H2 ||
          graph.pipeline_schedule == job::ZERO_BUBBLE_V) &&
         node.backward && node.weight_gradient && !node.once_per_step && node.stage.has_value();
}

// Passes 1 and 2: parses and validates the job (unknown ops, dangling or doubly produced tensors,
// cycles, bad shapes, bad placements, SBP hints that cannot hold) and infers every tensor's
// logical type. Errors are INVALID_ARGUMENT and name the op (or variable, input, tensor).
absl::StatusOr<LogicalGraph> BuildLogicalGraph(const job::Job& job, const OpRegistry& registry,
                                               const DeviceSet& devices);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_LOGICAL_GRAPH_H_
