#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/gradient_clipping.h"
#include "compiler/graph_lowering.h"
#include "compiler/kernel_attributes.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace loom::compiler {
namespace {

// Calls `emit` with consecutive runs of `members` (moved out of it) whose `packed_bytes` add up to
// at most `limit_bytes` (and at most the largest a tensor may be, core/tensor.h, whatever the job
// asks for), but a member larger than that alone: so the elements of a run of two or more add up
// without overflow.
template <typename Member, typename Emit>
absl::Status ForEachBucket(std::vector<Member>& members, int64_t limit_bytes, const Emit& emit) {
  const int64_t bucket_limit = std::min(limit_bytes, kMaxTensorBytes);
  std::vector<Member> bucket;
  int64_t bucket_bytes = 0;
  for (size_t i = 0; i <= members.size(); ++i) {
    const int64_t bytes = i < members.size() ? members[i].packed_bytes : 0;
    // bucket_bytes + bytes > bucket_limit, without a sum that could overflow.
    const bool full = !bucket.empty() && bytes > bucket_limit - bucket_bytes;
    if (i == members.size() || full) {
      if (absl::Status status = emit(bucket); !status.ok()) return status;
      bucket.clear();
      bucket_bytes = 0;
    }
    if (i < members.size()) {
      bucket.push_back(std::move(members[i]));
      bucket_bytes += bytes;
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Data parallelism: the gradients of variables that need only all-reduces (P on some hierarchy
// axes, to B there; any other axis unchanged, e.g. S(1) of a tensor-parallel weight) are packed
// per device into flat buckets of at most graph_.gradient_bucket_bytes per device, in reverse
// variable order (about the order the backward pass produces them), each all-reduced by one
// collective and unpacked. Along the reduced axes the bucket is one tensor; along the others
// its ranks hold different gradients, which no collective of the bucket mixes. The unpacked
// registers are what Materialize then returns for those gradients, so neither ConnectGradient
// nor the clipping ops change. As DDP does: one collective per bucket instead of one per
// variable. ZeRO stage 1 and 2's gradients (P to S(0) on one axis, the variable split along its
// tensor axis 0 there) are bucketed alike with a reduce-scatter: packed shard by shard
// (pack_shards), so that rank r of that axis gets its shard of every gradient of the bucket, one
// after the other, and unpacks them. What is bucketed is each conversion that a gradient's
// once-per-step readers need: the variable's (its value's SBP) and, under gradient clipping, the
// clipping ops' of the gradient before clipping. Called before the first op that reads a
// gradient (the clipping ops) and after every op; each time it takes the gradients lowered and
// not yet converted.
absl::Status GraphLowering::BucketGradients() {
  if (graph_.gradient_bucket_bytes <= 0) return absl::OkStatus();
  struct Member {
    int tensor = -1;
    int64_t packed_elements = 0;  // on every rank, as the gradient is packed
    int64_t packed_bytes = 0;
    std::vector<Shape> local_shapes;     // per rank, as the reader needs it
    std::vector<std::string> registers;  // per rank: the gradient (summed over micro-batches)
    std::string cache_key;               // Materialize's key for it as the reader needs it
  };
  struct Group {
    const Placement* placement = nullptr;
    NdSbp from;
    NdSbp to;
    int64_t shards = 1;  // the extent of the axis a reduce-scatter splits, else 1
    std::vector<Member> members;
  };
  // The SBPs that once-per-step ops on a tensor's placement read it as, by tensor.
  absl::flat_hash_map<int, std::vector<NdSbp>> read_as;
  for (const LogicalNode& node : graph_.nodes) {
    if (node.kind != LogicalNode::Kind::kOp || !node.once_per_step) continue;
    for (size_t i = 0; i < node.inputs.size() && i < node.input_sbp.size(); ++i) {
      if (PlacementOf(node.inputs[i]) == node.placement) {
        read_as[node.inputs[i]].push_back(Canonical(node.placement, node.input_sbp[i]));
      }
    }
  }
  std::map<std::string, Group> groups;
  std::vector<std::string> group_order;
  for (auto node = graph_.nodes.rbegin(); node != graph_.nodes.rend(); ++node) {
    if (node->kind != LogicalNode::Kind::kVariable || node->gradient < 0) continue;
    const LogicalTensor& value = graph_.tensors[node->outputs[0]];
    for (const int tensor : GradientTensorsOf(*node)) {
      const LogicalTensor& gradient = graph_.tensors[tensor];
      if (gradient.type.data_type != plan::FLOAT32 || local_registers_[tensor].empty() ||
          !(PlacementOf(tensor) == node->placement)) {
        continue;
      }
      std::vector<NdSbp> targets = read_as[tensor];
      if (tensor == node->gradient) targets.push_back(Canonical(node->placement, value.sbp));
      const NdSbp from = Canonical(node->placement, gradient.sbp);
      std::set<std::string> seen;
      for (const NdSbp& to : targets) {
        if (!seen.insert(NdSbpToString(to)).second) continue;
        // The bucket's SBP: the reduced axes as they are, B on the others; S(0) where the
        // reduction scatters (splitting the tensor's axis 0, which no other axis splits).
        NdSbp bucket_from(from.size(), Sbp::Broadcast());
        NdSbp bucket_to(from.size(), Sbp::Broadcast());
        bool reduces = false;
        bool only_reduces = true;
        int64_t shards = 1;       // the product of the scattering axes' extents
        bool kept_split = false;  // an axis splits the tensor's axis 0 before and after
        for (size_t axis = 0; axis < from.size(); ++axis) {
          if (from[axis].kind == Sbp::Kind::kPartialSum &&
              (to[axis].is_broadcast() || to[axis] == Sbp::Split(0))) {
            reduces = true;
            bucket_from[axis] = from[axis];
            bucket_to[axis] = to[axis];
            // A product of some of the placement's extents: at most its device count.
            if (to[axis] == Sbp::Split(0)) shards *= node->placement.hierarchy()[axis];
          } else if (from[axis] != to[axis] || from[axis].is_partial()) {
            only_reduces = false;
          } else if (to[axis] == Sbp::Split(0)) {
            kept_split = true;
          }
        }
        if (shards > 1 && kept_split) only_reduces = false;
        // ZeRO stage 3 reduce-scatters each gradient on its own, right after its op, so that one
        // full gradient is live at a time (FSDP's choice for its units); stages 1 and 2 bucket.
        if (!reduces || !only_reduces || (shards > 1 && node->gathered_per_use)) continue;
        // Every rank's part of the flat buffer must be the same size.
        std::vector<Shape> local_shapes;
        bool balanced = true;
        for (int rank = 0; rank < node->placement.size(); ++rank) {
          local_shapes.push_back(
              LocalWindowOf(gradient.type.shape, node->placement, to, rank).shape);
          balanced = balanced && local_shapes[rank].NumElements() == local_shapes[0].NumElements();
        }
        if (!balanced) continue;
        const bool accumulated = graph_.num_micro_batches > 1 && !graph_.PerStep(tensor);
        Member member;
        member.tensor = tensor;
        // The gradient's own local part (full along the scattered axis): a register lowering made.
        const Shape packed = LocalWindowOf(gradient.type.shape, node->placement, from, 0).shape;
        absl::StatusOr<int64_t> packed_bytes =
            CheckedTensorBytes(packed.dimensions(), gradient.type.data_type);
        if (!packed_bytes.ok()) return packed_bytes.status();
        member.packed_elements = packed.NumElements();
        member.packed_bytes = *packed_bytes;
        member.local_shapes = std::move(local_shapes);
        member.cache_key = ConversionKey(tensor, node->placement, to, accumulated);
        // Already converted for a reader lowered before: that collective serves.
        if (materialized_.contains(member.cache_key)) continue;
        if (accumulated) {
          absl::StatusOr<std::vector<std::string>> sums = Accumulated(tensor);
          if (!sums.ok()) return sums.status();
          member.registers = *sums;
        } else {
          member.registers = local_registers_[tensor];
        }
        const std::string group_key =
            absl::StrCat(node->placement.ToString(), "|", NdSbpToString(bucket_from), "|",
                         NdSbpToString(bucket_to));
        auto [group, inserted] = groups.try_emplace(group_key);
        if (inserted) {
          group->second.placement = &node->placement;
          group->second.from = bucket_from;
          group->second.to = bucket_to;
          group->second.shards = shards;
          group_order.push_back(group_key);
        }
        group->second.members.push_back(std::move(member));
      }
    }
  }
  for (const std::string& key : group_order) {
    Group& group = groups[key];
    if (absl::Status status = ForEachBucket(group.members, graph_.gradient_bucket_bytes,
                                            [&](const std::vector<Member>& bucket) {
                                              return ReduceBucket(group.placement, group.from,
                                                                  group.to, group.shards, bucket);
                                            });
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

// A trained variable's gradient and, under gradient clipping, its gradient before clipping.
std::vector<int> GraphLowering::GradientTensorsOf(const LogicalNode& variable) const {
  std::vector<int> tensors;
  if (variable.gradient < 0) return tensors;
  tensors.push_back(variable.gradient);
  auto unclipped =
      graph_.tensor_by_name.find(UnclippedGradientName(graph_.tensors[variable.gradient].name));
  if (unclipped != graph_.tensor_by_name.end()) tensors.push_back(unclipped->second);
  return tensors;
}

// One bucket of BucketGradients: pack (shard by shard when a reduce-scatter splits it in `shards`),
// all-reduce or reduce-scatter, unpack. A bucket of one gradient is left to the ordinary boxing.
template <typename MemberList>
absl::Status GraphLowering::ReduceBucket(const Placement* placement, const NdSbp& from,
                                         const NdSbp& to, int64_t shards,
                                         const MemberList& members) {
  if (members.size() < 2) return absl::OkStatus();
  int64_t elements = 0;  // within the bucket limit (ForEachBucket)
  for (const auto& member : members) elements += member.packed_elements;
  LogicalTensor bucket;
  bucket.name = absl::StrCat("gradient_bucket.", buckets_++);
  bucket.type.shape = Shape({elements});
  bucket.type.data_type = plan::FLOAT32;
  bucket.sbp = from;
  std::vector<std::string> registers;
  for (int rank = 0; rank < placement->size(); ++rank) {
    std::string reg =
        AddRegister(absl::StrCat(bucket.name, "@", rank), bucket.type.shape, plan::FLOAT32);
    plan::Task* task = AddTask(absl::StrCat("pack:", bucket.name, "@", rank), plan::COMPUTE,
                               placement->device(rank), plan::STREAM_COMPUTE);
    plan::KernelConf pack = KernelOfType(shards > 1 ? "pack_shards" : "pack_flat");
    if (shards > 1) SetInt(&pack, "shards", shards);
    task->set_kernel_index(kernels_.Add(std::move(pack)));
    for (const auto& member : members) task->add_inputs(member.registers[rank]);
    task->add_outputs(reg);
    registers.push_back(std::move(reg));
  }
  absl::StatusOr<BoxingPlan> boxing = PlanBoxing(bucket.type, *placement, from, *placement, to);
  if (!boxing.ok()) return boxing.status();
  for (const BoxingStep& step : boxing->source_steps) {
    registers = ApplyStep(bucket, *placement, step, registers, /*per_step=*/true);
  }
  std::vector<std::vector<std::string>> unpacked(members.size());
  for (int rank = 0; rank < placement->size(); ++rank) {
    plan::Task* task = AddTask(absl::StrCat("unpack:", bucket.name, "@", rank), plan::COMPUTE,
                               placement->device(rank), plan::STREAM_COMPUTE);
    task->set_kernel_index(kernels_.Add(KernelOfType("unpack_flat")));
    task->add_inputs(registers[rank]);
    for (size_t i = 0; i < members.size(); ++i) {
      const LogicalTensor& gradient = graph_.tensors[members[i].tensor];
      std::string reg = AddRegister(absl::StrCat(gradient.name, "~", bucket.name, "@", rank),
                                    members[i].local_shapes[rank], plan::FLOAT32);
      task->add_outputs(reg);
      unpacked[i].push_back(std::move(reg));
    }
  }
  for (size_t i = 0; i < members.size(); ++i) {
    materialized_[members[i].cache_key] = std::move(unpacked[i]);
  }
  return absl::OkStatus();
}

// A tensor the step starts from (a trained variable, or what once-per-step ops compute from such
// variables alone: a weight's bfloat16 copy) split S(0) on one axis of its placement (and along
// its tensor axis 0 on no other) that ops on its placement read whole along that axis (B there,
// the other axes as they are: ZeRO stages 1 and 2, a row-parallel weight that the backward reads
// whole) is gathered in a bucket with the others alike: per device one pack_flat of its shards,
// one all-gather, one unpack_shards into each tensor's gathered register, which Materialize then
// returns for it. Buckets hold at most
// graph_.gradient_bucket_bytes of gathered parameters, in the order ops first read them, so that
// the act order (compiler/act_order.h) gathers each one use ahead of its first reader as it does
// a variable's own gather. Stage 3 gathers each variable per use instead (its copy freed after).
// Needs `step_start` lowered and no other op yet.
absl::Status GraphLowering::BucketGathers(const absl::flat_hash_set<int>& step_start) {
  if (graph_.gradient_bucket_bytes <= 0) return absl::OkStatus();
  struct Member {
    int tensor = -1;
    int first_reader = 0;         // node index
    int axis = -1;                // the gathered hierarchy axis
    int64_t packed_elements = 0;  // on every rank, gathered
    int64_t packed_bytes = 0;
    std::vector<Shape> gathered_shapes;  // per rank
    std::string cache_key;               // Materialize's key for it gathered
  };
  // The readers of those tensors on their placements: the first reader of each SBP they need.
  std::map<int, std::map<std::string, std::pair<int, NdSbp>>> wanted;  // tensor -> SBP -> reader
  for (int index = 0; index < static_cast<int>(graph_.nodes.size()); ++index) {
    const LogicalNode& node = graph_.nodes[index];
    if (node.kind != LogicalNode::Kind::kOp) continue;
    for (size_t i = 0; i < node.inputs.size() && i < node.input_sbp.size(); ++i) {
      if (!step_start.contains(node.inputs[i]) ||
          !(PlacementOf(node.inputs[i]) == node.placement)) {
        continue;
      }
      const NdSbp sbp = Canonical(node.placement, node.input_sbp[i]);
      wanted[node.inputs[i]].try_emplace(NdSbpToString(sbp), index, sbp);
    }
  }
  std::vector<Member> members;
  for (const auto& [tensor_id, readers] : wanted) {
    const LogicalTensor& value = graph_.tensors[tensor_id];
    const Placement& placement = PlacementOf(tensor_id);
    const NdSbp from = Canonical(placement, value.sbp);
    for (const auto& [text, reader] : readers) {
      const NdSbp& to = reader.second;
      int axis = -1;
      bool gathers_one_axis = true;
      for (size_t a = 0; a < from.size(); ++a) {
        if (from[a] == Sbp::Split(0) && to[a].is_broadcast() && axis < 0) {
          axis = static_cast<int>(a);
        } else if (from[a] != to[a] || to[a] == Sbp::Split(0)) {
          gathers_one_axis = false;
        }
      }
      if (axis < 0 || !gathers_one_axis) continue;
      Member member;
      member.tensor = tensor_id;
      member.first_reader = reader.first;
      member.axis = axis;
      // Every rank's shard must be the same size.
      const int64_t shard = LocalWindowOf(value.type.shape, placement, from, 0).shape.NumElements();
      bool balanced = true;
      for (int rank = 0; rank < placement.size(); ++rank) {
        balanced =
            balanced &&
            LocalWindowOf(value.type.shape, placement, from, rank).shape.NumElements() == shard;
        member.gathered_shapes.push_back(
            LocalWindowOf(value.type.shape, placement, to, rank).shape);
      }
      if (!balanced) continue;
      absl::StatusOr<int64_t> packed_bytes =
          CheckedTensorBytes(member.gathered_shapes[0].dimensions(), value.type.data_type);
      if (!packed_bytes.ok()) return packed_bytes.status();
      member.packed_elements = member.gathered_shapes[0].NumElements();
      member.packed_bytes = *packed_bytes;
      member.cache_key = ConversionKey(tensor_id, placement, to, /*accumulated=*/false);
      members.push_back(std::move(member));
    }
  }
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.first_reader < b.first_reader;
  });
  // Groups: one placement, gathered axis and data type each, in the order of their first members.
  std::map<std::string, std::vector<Member>> groups;
  std::vector<std::string> group_order;
  for (Member& member : members) {
    const LogicalTensor& value = graph_.tensors[member.tensor];
    const std::string key = absl::StrCat(PlacementOf(member.tensor).ToString(), "|", member.axis,
                                         "|", DataTypeName(value.type.data_type));
    auto [group, inserted] = groups.try_emplace(key);
    if (inserted) group_order.push_back(key);
    group->second.push_back(std::move(member));
  }
  for (const std::string& key : group_order) {
    std::vector<Member>& group = groups[key];
    const LogicalTensor& first = graph_.tensors[group[0].tensor];
    const Placement& placement = PlacementOf(group[0].tensor);
    const int axis = group[0].axis;
    if (absl::Status status = ForEachBucket(group, graph_.gradient_bucket_bytes,
                                            [&](const std::vector<Member>& bucket) {
                                              return GatherBucket(placement, axis,
                                                                  first.type.data_type, bucket);
                                            });
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

// One bucket of BucketGathers: pack each rank's shards, all-gather them over `axis`, unpack each
// variable whole (unpack_shards: rank r's block holds shard r of every member, one after the
// other). A bucket of one variable is left to the ordinary boxing.
template <typename MemberList>
absl::Status GraphLowering::GatherBucket(const Placement& placement, int axis,
                                         plan::DataType data_type, const MemberList& members) {
  if (members.size() < 2) return absl::OkStatus();
  const int64_t shards = placement.hierarchy()[static_cast<size_t>(axis)];
  int64_t elements = 0;  // within the bucket limit (ForEachBucket)
  for (const auto& member : members) elements += member.packed_elements;
  LogicalTensor bucket;
  bucket.name = absl::StrCat("parameter_bucket.", buckets_++);
  bucket.type.shape = Shape({elements});
  bucket.type.data_type = data_type;
  bucket.sbp = NdSbp(placement.num_axes(), Sbp::Broadcast());
  bucket.sbp[static_cast<size_t>(axis)] = Sbp::Split(0);
  std::vector<std::string> registers;
  for (int rank = 0; rank < placement.size(); ++rank) {
    std::string reg =
        AddRegister(absl::StrCat(bucket.name, "@", rank), Shape({elements / shards}), data_type);
    plan::Task* task = AddTask(absl::StrCat("pack:", bucket.name, "@", rank), plan::COMPUTE,
                               placement.device(rank), plan::STREAM_COMPUTE);
    task->set_kernel_index(kernels_.Add(KernelOfType("pack_flat")));
    for (const auto& member : members) task->add_inputs(local_registers_[member.tensor][rank]);
    task->add_outputs(reg);
    registers.push_back(std::move(reg));
  }
  absl::StatusOr<BoxingPlan> boxing = PlanBoxing(bucket.type, placement, bucket.sbp, placement,
                                                 NdSbp(placement.num_axes(), Sbp::Broadcast()));
  if (!boxing.ok()) return boxing.status();
  for (const BoxingStep& step : boxing->source_steps) {
    registers = ApplyStep(bucket, placement, step, registers, /*per_step=*/true);
  }
  std::vector<std::vector<std::string>> unpacked(members.size());
  for (int rank = 0; rank < placement.size(); ++rank) {
    plan::Task* task = AddTask(absl::StrCat("unpack:", bucket.name, "@", rank), plan::COMPUTE,
                               placement.device(rank), plan::STREAM_COMPUTE);
    plan::KernelConf unpack = KernelOfType("unpack_shards");
    SetInt(&unpack, "shards", shards);
    task->set_kernel_index(kernels_.Add(std::move(unpack)));
    task->add_inputs(registers[rank]);
    for (size_t i = 0; i < members.size(); ++i) {
      const LogicalTensor& value = graph_.tensors[members[i].tensor];
      std::string reg = AddRegister(absl::StrCat(value.name, "~", bucket.name, "@", rank),
                                    members[i].gathered_shapes[rank], data_type);
      task->add_outputs(reg);
      unpacked[i].push_back(std::move(reg));
    }
  }
  for (size_t i = 0; i < members.size(); ++i) {
    materialized_[members[i].cache_key] = std::move(unpacked[i]);
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
