#ifndef LOOM_COMPILER_GRAPH_LOWERING_H_
#define LOOM_COMPILER_GRAPH_LOWERING_H_

// GraphLowering: the state of lowering one logical graph to a plan (LowerToPlan of
// compiler/lowering.h, the only user), and its parts, each defined in the file named after it:
// the nodes, fetches and variable updates (lowering.cc), the data-parallel gradient buckets
// (gradient_buckets.cc), and the boxing of a tensor between SBPs and placements
// (boxing_lowering.cc). Internal to the compiler: include compiler/lowering.h instead.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/boxing.h"
#include "compiler/logical_graph.h"
#include "core/device_key.h"
#include "core/shared_kernels.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

class GraphLowering {
 public:
  GraphLowering(const LogicalGraph& graph, const DeviceSet& devices, int64_t max_tasks)
      : graph_(graph), devices_(devices), max_tasks_(max_tasks) {}

  absl::StatusOr<plan::Plan> Run();

 private:
  // --- The plan, nodes and fetches (lowering.cc) -----------------------------------------------

  absl::Status CheckTaskCount(absl::string_view what) const;
  void AddHostDevices();
  std::string AddRegister(const std::string& name, const Shape& shape, plan::DataType type,
                          int num_slots = 0);
  plan::Task* AddTask(const std::string& name, plan::TaskKind kind, const plan::Device& device,
                      plan::StreamKind stream, int stream_index = 0);
  const Placement& PlacementOf(int tensor) const;
  // Task.evaluation_every_steps and first_step for a task of an evaluation op or input.
  void MarkEvaluation(const LogicalNode& node, plan::Task* task) const;
  absl::Status LowerSource(const LogicalNode& node);
  absl::Status ConnectGradient(const LogicalNode& node);
  absl::Status LowerOp(const LogicalNode& node);
  absl::Status LowerFetch(int tensor_id);

  // --- Gradient and parameter buckets (gradient_buckets.cc) -------------------------------------

  absl::Status BucketGradients();
  std::vector<int> GradientTensorsOf(const LogicalNode& variable) const;
  // Instantiated only by BucketGradients, with its own list of members.
  template <typename MemberList>
  absl::Status ReduceBucket(const Placement* placement, const NdSbp& from, const NdSbp& to,
                            int64_t shards, const MemberList& members);
  // `step_start`: the tensors (lowered, once per step) whose gathers may be bucketed.
  absl::Status BucketGathers(const absl::flat_hash_set<int>& step_start);
  // Instantiated only by BucketGathers.
  template <typename MemberList>
  absl::Status GatherBucket(const Placement& placement, int axis, plan::DataType data_type,
                            const MemberList& members);

  // --- Boxing (boxing_lowering.cc) --------------------------------------------------------------

  static NdSbp Canonical(const Placement& placement, NdSbp sbp);
  // The key of materialized_ for `tensor` (its per-step sums where `accumulated`) as the canonical
  // `sbp` on `placement` (for one consumer where `use` is not -1).
  static std::string ConversionKey(int tensor_id, const Placement& placement, const NdSbp& sbp,
                                   bool accumulated, int use = -1);
  // `use`: the consuming op's node, for a variable gathered per use (LogicalNode.gathered_per_use:
  // its conversion is built for that op alone); -1 where every consumer shares it.
  absl::StatusOr<std::vector<std::string>> Materialize(int tensor_id, const Placement& to_placement,
                                                       const NdSbp& to_sbp, bool per_step,
                                                       int use = -1);
  absl::StatusOr<std::vector<std::string>> Accumulated(int tensor_id);
  // Per rank of the producer: a per-step tensor repeated to the step's micro-batches.
  std::vector<std::string> Repeated(int tensor_id);
  // Accumulated's and Repeated's tasks (ACCUMULATE or REPEAT), made once per tensor.
  std::vector<std::string> StepToMicroBatches(int tensor_id, plan::TaskKind kind);
  // What Box converts: the tensor's pieces as produced, their per-step sums (Accumulated), or a
  // per-step tensor's repeats (Repeated: converted once per micro-batch).
  enum class BoxSource { kProduced, kSummed, kRepeated };
  absl::StatusOr<std::vector<std::string>> Box(int tensor_id, BoxSource source,
                                               const Placement& to_placement, const NdSbp& to_sbp,
                                               int use = -1);
  std::string NextLabel(const std::string& tensor_name);
  // How often a collective runs: its communicator's order holds only collectives of one rate.
  // Deferred: a zero-bubble weight gradient's, per micro-batch but micro-batches behind the
  // forward and input-gradient collectives of its devices. Backward: of a pipeline's backward
  // pass (a backward op's tensor, recomputed copies included) under micro-batches, which a stage
  // runs while it runs later micro-batches' forwards: each pass keeps its own order, so that
  // neither waits for the other's collectives of an earlier micro-batch.
  enum class CollectiveRate { kPerMicroBatch, kPerStep, kDeferred, kBackward };
  plan::Communicator& CommunicatorOf(const Placement& placement, const std::vector<int>& group,
                                     CollectiveRate rate);
  int StreamIndexOf(const plan::Device& device, const std::string& communicator);
  std::vector<std::string> ApplyStep(const LogicalTensor& tensor, const Placement& placement,
                                     const BoxingStep& step,
                                     const std::vector<std::string>& registers, bool per_step);

  const LogicalGraph& graph_;
  const DeviceSet& devices_;
  const int64_t max_tasks_;  // 0: no limit
  plan::Plan plan_;
  // The plan's kernel configurations, each held once (an op's ranks mostly share theirs).
  SharedKernels kernels_{&plan_};
  std::vector<std::vector<std::string>> local_registers_;  // by tensor: register per rank
  absl::flat_hash_map<std::string, std::vector<std::string>> materialized_;
  absl::flat_hash_map<std::string, int> boxing_count_;
  // By member devices (sorted, so the plan is deterministic).
  std::map<std::string, plan::Communicator> communicators_;
  absl::flat_hash_map<DeviceKey, absl::flat_hash_map<std::string, int>> communication_streams_;
  // The devices with an all-to-all once per micro-batch (AssignRegisterSlots: token exchanges).
  absl::flat_hash_set<DeviceKey> all_to_all_devices_;
  absl::flat_hash_map<std::string, int64_t> sequence_of_group_step_;
  // Variable name -> its VARIABLE task per rank (positions in plan_.tasks()).
  absl::flat_hash_map<std::string, std::vector<int>> variable_tasks_;
  // Tensor id -> its per-step sums per rank.
  // StepToMicroBatches's registers, by tensor and task kind.
  absl::flat_hash_map<std::pair<int, plan::TaskKind>, std::vector<std::string>> rate_changed_;
  // Gradient buckets made so far (their names count up).
  int buckets_ = 0;
  // The logical op of each op task.
  absl::flat_hash_map<std::string, const LogicalNode*> op_of_task_;
};

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_GRAPH_LOWERING_H_
