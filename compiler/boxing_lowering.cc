#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/graph_lowering.h"
#include "compiler/kernel_attributes.h"

namespace loom::compiler {
namespace {

// A device in the text that orders communicators by their members.
std::string DeviceSortKey(const plan::Device& device) {
  return absl::StrCat(device.node(), "/", static_cast<int>(device.type()), ":", device.index());
}

// A conversion built for one consumer (Materialize's `use`) is cached for it alone.
std::string UseKey(int use) { return use < 0 ? "" : absl::StrCat("|use ", use); }

// A copy between CPU devices of one node is a memcpy in the process's memory: it runs on the
// receiver's compute stream, first among what is ready there, instead of on its copy-in stream,
// so that what the copy unblocks follows it on the same thread (a copy-in stream would add a
// thread hand-off, a wake-up, to every transfer: docs/PERFORMANCE.md, "bubble"). Copies into or
// out of accelerators keep their copy streams, which overlap the device's compute.
constexpr int32_t kHostCopyPriority = std::numeric_limits<int32_t>::max();

bool IsHostCopy(const plan::Device& from, const plan::Device& to) {
  return from.type() == plan::CPU && to.type() == plan::CPU && from.node() == to.node();
}

}  // namespace

NdSbp GraphLowering::Canonical(const Placement& placement, NdSbp sbp) {
  for (size_t axis = 0; axis < sbp.size(); ++axis) {
    if (placement.hierarchy()[axis] == 1) sbp[axis] = Sbp::Broadcast();
  }
  return sbp;
}

std::string GraphLowering::ConversionKey(int tensor_id, const Placement& placement,
                                         const NdSbp& sbp, bool accumulated, int use) {
  return absl::StrCat(tensor_id, "|", placement.ToString(), "|", NdSbpToString(sbp),
                      accumulated ? "|sum" : "", UseKey(use));
}

// The registers (per rank of `to_placement`) holding `tensor` as `to_sbp`, once per step or
// once per micro-batch; built once per distinct conversion and shared by every consumer that
// needs it (by `use` alone where it is not -1). With micro-batches, a per-micro-batch tensor
// read once per step is summed over the step's micro-batches (ACCUMULATE) before boxing, and a
// per-step tensor read per micro-batch is boxed, then repeated (REPEAT). Except a variable
// gathered per use (ZeRO stage 3) outside pipelines: its shard is repeated, then gathered for
// each micro-batch, so that the gathered copy lives for one use of one micro-batch (the act
// order puts micro-batch n + 1's after n's: compiler/act_order.h), not for the whole step, at M
// times the gathers' traffic, as FSDP and DeepSpeed's stage 3 do under gradient accumulation.
// In a pipeline nothing orders the micro-batches, so there a copy is gathered once a step.
absl::StatusOr<std::vector<std::string>> GraphLowering::Materialize(int tensor_id,
                                                                    const Placement& to_placement,
                                                                    const NdSbp& to_sbp,
                                                                    bool per_step, int use) {
  const bool from_per_step = graph_.PerStep(tensor_id);
  if (graph_.num_micro_batches == 1 || from_per_step == per_step) {
    return Box(tensor_id, BoxSource::kProduced, to_placement, to_sbp, use);
  }
  if (!from_per_step) return Box(tensor_id, BoxSource::kSummed, to_placement, to_sbp, use);
  if (use >= 0 && graph_.num_stages <= 1) {
    return Box(tensor_id, BoxSource::kRepeated, to_placement, to_sbp, use);
  }
  absl::StatusOr<std::vector<std::string>> boxed =
      Box(tensor_id, BoxSource::kProduced, to_placement, to_sbp, use);
  if (!boxed.ok()) return boxed.status();
  const LogicalTensor& tensor = graph_.tensors[tensor_id];
  std::string key = absl::StrCat(tensor_id, "|", to_placement.ToString(), "|",
                                 NdSbpToString(to_sbp), "|repeat", UseKey(use));
  auto cached = materialized_.find(key);
  if (cached != materialized_.end()) return cached->second;
  const std::string label = NextLabel(tensor.name);
  std::vector<std::string> repeated;
  for (int rank = 0; rank < to_placement.size(); ++rank) {
    Shape local = LocalWindowOf(tensor.type.shape, to_placement, to_sbp, rank).shape;
    std::string reg =
        AddRegister(absl::StrCat(tensor.name, "~", label, "@", rank), local, tensor.type.data_type);
    plan::Task* task = AddTask(absl::StrCat("repeat:", tensor.name, "~", label, "@", rank),
                               plan::REPEAT, to_placement.device(rank), plan::STREAM_COMPUTE);
    task->set_factor(graph_.num_micro_batches);
    task->add_inputs((*boxed)[rank]);
    task->add_outputs(reg);
    repeated.push_back(std::move(reg));
  }
  materialized_[key] = repeated;
  return repeated;
}

// Per rank of the producer: the sum of the step's micro-batch pieces of a tensor.
absl::StatusOr<std::vector<std::string>> GraphLowering::Accumulated(int tensor_id) {
  const LogicalTensor& tensor = graph_.tensors[tensor_id];
  if (tensor.type.data_type != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name, "' (", tensor.type.ToString(),
        ") is produced per micro-batch and read once per step, but only float32 tensors can be "
        "summed over micro-batches"));
  }
  return StepToMicroBatches(tensor_id, plan::ACCUMULATE);
}

std::vector<std::string> GraphLowering::Repeated(int tensor_id) {
  return StepToMicroBatches(tensor_id, plan::REPEAT);
}

std::vector<std::string> GraphLowering::StepToMicroBatches(int tensor_id, plan::TaskKind kind) {
  std::vector<std::string>& registers = rate_changed_[{tensor_id, kind}];
  if (!registers.empty()) return registers;
  const LogicalTensor& tensor = graph_.tensors[tensor_id];
  const Placement& placement = PlacementOf(tensor_id);
  const bool sum = kind == plan::ACCUMULATE;
  for (int rank = 0; rank < placement.size(); ++rank) {
    Shape local = LocalWindowOf(tensor.type.shape, placement, tensor.sbp, rank).shape;
    std::string reg = AddRegister(absl::StrCat(tensor.name, sum ? "~sum@" : "~repeat@", rank),
                                  local, tensor.type.data_type);
    plan::Task* task =
        AddTask(absl::StrCat(sum ? "accumulate:" : "repeat:", tensor.name, "@", rank), kind,
                placement.device(rank), plan::STREAM_COMPUTE);
    task->set_factor(graph_.num_micro_batches);
    task->add_inputs(local_registers_[tensor_id][rank]);
    task->add_outputs(reg);
    registers.push_back(std::move(reg));
  }
  return registers;
}

// Boxing of `tensor` (its registers, their per-step sums or their repeats: `source`) to
// `to_placement` and `to_sbp`.
absl::StatusOr<std::vector<std::string>> GraphLowering::Box(int tensor_id, BoxSource source,
                                                            const Placement& to_placement,
                                                            const NdSbp& to_sbp, int use) {
  const LogicalTensor& tensor = graph_.tensors[tensor_id];
  const Placement& from_placement = PlacementOf(tensor_id);
  const bool accumulated = source == BoxSource::kSummed;
  std::vector<std::string> registers = local_registers_[tensor_id];
  if (accumulated) {
    absl::StatusOr<std::vector<std::string>> sums = Accumulated(tensor_id);
    if (!sums.ok()) return sums.status();
    registers = *sums;
  } else if (source == BoxSource::kRepeated) {
    registers = Repeated(tensor_id);
  }
  // On a hierarchy axis of one device every SBP lays the tensor out alike.
  const NdSbp from_sbp = Canonical(from_placement, tensor.sbp);
  const NdSbp canonical_to_sbp = Canonical(to_placement, to_sbp);
  if (from_placement == to_placement && from_sbp == canonical_to_sbp) return registers;
  const std::string key =
      ConversionKey(tensor_id, to_placement, canonical_to_sbp, accumulated, use) +
      (source == BoxSource::kRepeated ? "|repeated" : "");
  auto cached = materialized_.find(key);
  if (cached != materialized_.end()) return cached->second;

  absl::StatusOr<BoxingPlan> boxing =
      PlanBoxing(tensor.type, from_placement, from_sbp, to_placement, canonical_to_sbp);
  if (!boxing.ok()) return boxing.status();
  // Collectives of per-step and per-micro-batch tensors run different numbers of times per
  // step, so they use different communicators (each runs its collectives in one fixed order);
  // so do those of deferred weight gradients and of a pipeline's backward pass (ApplyStep).
  const bool per_step =
      accumulated || (source == BoxSource::kProduced && graph_.PerStep(tensor_id));
  for (const BoxingStep& step : boxing->source_steps) {
    registers = ApplyStep(tensor, from_placement, step, registers, per_step);
  }
  if (boxing->crosses_placements) {
    std::string label = NextLabel(tensor.name);
    std::vector<std::string> copied;
    for (int rank = 0; rank < to_placement.size(); ++rank) {
      int source_rank = boxing->one_to_one ? rank : 0;
      NdSbp sbp = boxing->one_to_one ? to_sbp : NdSbp(to_placement.num_axes(), Sbp::Broadcast());
      Shape local = LocalWindowOf(tensor.type.shape, to_placement, sbp, rank).shape;
      std::string reg = AddRegister(absl::StrCat(tensor.name, "~", label, "@", rank), local,
                                    tensor.type.data_type);
      const plan::Device& to = to_placement.device(rank);
      const bool host_copy = IsHostCopy(from_placement.device(source_rank), to);
      plan::Task* task =
          AddTask(absl::StrCat("copy:", tensor.name, "~", label, "@", rank), plan::COPY, to,
                  host_copy ? plan::STREAM_COMPUTE : plan::STREAM_COPY_IN);
      if (host_copy) task->set_priority(kHostCopyPriority);
      task->add_inputs(registers[source_rank]);
      task->add_outputs(reg);
      copied.push_back(reg);
    }
    registers = std::move(copied);
    for (const BoxingStep& step : boxing->destination_steps) {
      registers = ApplyStep(tensor, to_placement, step, registers, per_step);
    }
  }
  materialized_[key] = registers;
  return registers;
}

std::string GraphLowering::NextLabel(const std::string& tensor_name) {
  return absl::StrCat(++boxing_count_[tensor_name]);
}

// The communicator of a group of ranks for collectives of one rate (created on first use).
plan::Communicator& GraphLowering::CommunicatorOf(const Placement& placement,
                                                  const std::vector<int>& group,
                                                  CollectiveRate rate) {
  std::vector<std::string> keys;
  for (int rank : group) keys.push_back(DeviceSortKey(placement.device(rank)));
  std::string key = absl::StrJoin(keys, ",");
  if (rate == CollectiveRate::kPerStep && graph_.num_micro_batches > 1) key += "|step";
  if (rate == CollectiveRate::kDeferred) key += "|deferred";
  if (rate == CollectiveRate::kBackward) key += "|backward";
  auto found = communicators_.find(key);
  if (found != communicators_.end()) return found->second;
  plan::Communicator& communicator = communicators_[key];
  communicator.set_name(absl::StrCat("comm", communicators_.size() - 1));
  for (int rank : group) *communicator.add_devices() = placement.device(rank);
  return communicator;
}

int GraphLowering::StreamIndexOf(const plan::Device& device, const std::string& communicator) {
  auto& streams = communication_streams_[DeviceKey::Of(device)];
  auto found = streams.find(communicator);
  if (found != streams.end()) return found->second;
  int index = static_cast<int>(streams.size());
  streams[communicator] = index;
  return index;
}

std::vector<std::string> GraphLowering::ApplyStep(const LogicalTensor& tensor,
                                                  const Placement& placement,
                                                  const BoxingStep& step,
                                                  const std::vector<std::string>& registers,
                                                  bool per_step) {
  const std::string label = NextLabel(tensor.name);
  std::vector<std::string> result(placement.size());
  const int h = step.hierarchy_axis;
  // (A gradient bucket, a flat buffer of per-step gradients, has no producer node.)
  const LogicalNode* producer = tensor.producer >= 0 ? &graph_.nodes[tensor.producer] : nullptr;
  CollectiveRate rate = per_step ? CollectiveRate::kPerStep : CollectiveRate::kPerMicroBatch;
  if (!per_step && producer != nullptr) {
    if (DefersWeightGradient(graph_, *producer)) {
      rate = CollectiveRate::kDeferred;
    } else if (graph_.num_stages > 1 && graph_.num_micro_batches > 1 && producer->backward) {
      rate = CollectiveRate::kBackward;
    }
  }
  for (int rank = 0; rank < placement.size(); ++rank) {
    LocalWindow before = LocalWindowOf(tensor.type.shape, placement, step.from, rank);
    LocalWindow after = LocalWindowOf(tensor.type.shape, placement, step.to, rank);
    const plan::Device& device = placement.device(rank);
    std::string reg = absl::StrCat(tensor.name, "~", label, "@", rank);
    std::string task_name = absl::StrCat("box:", tensor.name, "~", label, "@", rank);
    if (step.kind == BoxingStep::Kind::kZeroFill && placement.Coordinates(rank)[h] == 0) {
      result[rank] = registers[rank];  // the first member keeps the value
      continue;
    }
    AddRegister(reg, after.shape, tensor.type.data_type);
    result[rank] = reg;
    plan::Task* task;
    if (step.is_collective()) {
      std::vector<int> group = placement.GroupAlong(rank, h);
      plan::Communicator& communicator = CommunicatorOf(placement, group, rate);
      int position = static_cast<int>(placement.Coordinates(rank)[h]);
      if (position == 0) {
        sequence_of_group_step_[absl::StrCat(label, "|", group[0])] =
            communicator.num_collectives();
        communicator.set_num_collectives(communicator.num_collectives() + 1);
      }
      int64_t sequence = sequence_of_group_step_[absl::StrCat(label, "|", group[0])];
      task = AddTask(task_name, plan::COLLECTIVE, device, plan::STREAM_COMMUNICATION,
                     StreamIndexOf(device, communicator.name()));
      task->set_rank(position);
      plan::CollectiveConf* conf = task->mutable_collective();
      conf->set_communicator(communicator.name());
      conf->set_sequence(sequence);
      conf->set_name(absl::StrCat(tensor.name, "~", label));
      conf->set_reduce(step.reduce_max ? plan::REDUCE_MAX : plan::REDUCE_SUM);
      conf->set_axis(step.axis);
      conf->set_concat_axis(step.concat_axis);
      switch (step.kind) {
        case BoxingStep::Kind::kAllGather:
          conf->set_kind(plan::ALL_GATHER);
          break;
        case BoxingStep::Kind::kAllReduce:
          conf->set_kind(plan::ALL_REDUCE);
          break;
        case BoxingStep::Kind::kReduceScatter:
          conf->set_kind(plan::REDUCE_SCATTER);
          break;
        default:
          conf->set_kind(plan::ALL_TO_ALL);
          if (rate != CollectiveRate::kPerStep) {
            all_to_all_devices_.insert(DeviceKey::Of(device));
          }
          break;
      }
    } else {
      task = AddTask(task_name, plan::COMPUTE, device, plan::STREAM_COMPUTE);
      plan::KernelConf kernel;
      std::vector<int64_t> begin(tensor.type.shape.rank());
      if (step.kind == BoxingStep::Kind::kLocalSlice) {
        kernel.set_op_type("slice");
        std::vector<int64_t> end(tensor.type.shape.rank());
        for (int axis = 0; axis < tensor.type.shape.rank(); ++axis) {
          begin[axis] = after.begin[axis] - before.begin[axis];
          end[axis] = begin[axis] + after.shape.dimension(axis);
        }
        SetIntList(&kernel, "begin", begin);
        SetIntList(&kernel, "end", end);
      } else if (step.kind == BoxingStep::Kind::kLocalPad) {
        kernel.set_op_type("pad");
        for (int axis = 0; axis < tensor.type.shape.rank(); ++axis) {
          begin[axis] = before.begin[axis] - after.begin[axis];
        }
        SetIntList(&kernel, "begin", begin);
      } else {
        kernel.set_op_type("zeros_like");
      }
      task->set_kernel_index(kernels_.Add(std::move(kernel)));
    }
    task->add_inputs(registers[rank]);
    task->add_outputs(reg);
  }
  return result;
}

}  // namespace loom::compiler
