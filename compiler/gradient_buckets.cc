#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/graph_lowering.h"
#include "compiler/kernel_attributes.h"
#include "core/tensor.h"

namespace loom::compiler {

// Data parallelism: the gradients of variables that need only all-reduces (P on some hierarchy
// axes, to B there; any other axis unchanged, e.g. S(1) of a tensor-parallel weight) are packed
// per device into flat buckets of at most graph_.gradient_bucket_bytes per device, in reverse
// variable order (about the order the backward pass produces them), each all-reduced by one
// collective and unpacked. Along the reduced axes the bucket is one tensor; along the others
// its ranks hold different gradients, which no collective of the bucket mixes. The unpacked
// registers are what Materialize then returns for those gradients, so ConnectGradient does not
// change. As DDP does: one collective per bucket instead of one per variable. ZeRO stage 1 and 2's
// gradients (P to S(0) on one axis, the variable split along its tensor axis 0 there) are
// bucketed alike with a reduce-scatter: packed shard by shard (pack_shards), so that rank r of
// that axis gets its shard of every gradient of the bucket, one after the other, and unpacks them.
absl::Status GraphLowering::BucketGradients() {
  if (graph_.gradient_bucket_bytes <= 0) return absl::OkStatus();
  struct Member {
    int tensor = -1;
    int64_t local_elements = 0;          // on every rank, as the variable holds it
    int64_t packed_elements = 0;         // on every rank, as the gradient is packed
    std::vector<Shape> local_shapes;     // per rank, as the variable holds it
    std::vector<std::string> registers;  // per rank: the gradient (summed over micro-batches)
    std::string cache_key;               // Materialize's key for it as the variable's SBP
  };
  struct Group {
    const Placement* placement = nullptr;
    NdSbp from;
    NdSbp to;
    int64_t shards = 1;  // the extent of the axis a reduce-scatter splits, else 1
    std::vector<Member> members;
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> group_order;
  for (auto node = graph_.nodes.rbegin(); node != graph_.nodes.rend(); ++node) {
    if (node->kind != LogicalNode::Kind::kVariable || node->gradient < 0) continue;
    const LogicalTensor& gradient = graph_.tensors[node->gradient];
    const LogicalTensor& value = graph_.tensors[node->outputs[0]];
    if (gradient.type.data_type != plan::FLOAT32) continue;
    if (!(PlacementOf(node->gradient) == node->placement)) continue;
    const NdSbp from = Canonical(node->placement, gradient.sbp);
    const NdSbp to = Canonical(node->placement, value.sbp);
    // The bucket's SBP: the reduced axes as they are, B on the others; S(0) where the reduction
    // scatters (at most one axis, splitting the variable's tensor axis 0, which no other axis
    // splits).
    NdSbp bucket_from(from.size(), Sbp::Broadcast());
    NdSbp bucket_to(from.size(), Sbp::Broadcast());
    bool reduces = false;
    bool only_reduces = true;
    int scatter_axis = -1;
    for (size_t axis = 0; axis < from.size(); ++axis) {
      if (from[axis].kind == Sbp::Kind::kPartialSum && to[axis].is_broadcast()) {
        reduces = true;
        bucket_from[axis] = from[axis];
      } else if (from[axis].kind == Sbp::Kind::kPartialSum && to[axis] == Sbp::Split(0) &&
                 scatter_axis < 0) {
        reduces = true;
        scatter_axis = static_cast<int>(axis);
        bucket_from[axis] = from[axis];
        bucket_to[axis] = Sbp::Split(0);
      } else if (from[axis] != to[axis] || from[axis].is_partial()) {
        only_reduces = false;
      }
    }
    for (size_t axis = 0; axis < to.size() && scatter_axis >= 0; ++axis) {
      if (static_cast<int>(axis) != scatter_axis && to[axis] == Sbp::Split(0)) only_reduces = false;
    }
    // ZeRO stage 3 reduce-scatters each gradient on its own, right after its op, so that one full
    // gradient is live at a time (FSDP's choice for its units); stages 1 and 2 bucket.
    if (!reduces || !only_reduces || (scatter_axis >= 0 && node->gathered_per_use)) continue;
    const int64_t shards =
        scatter_axis < 0 ? 1 : node->placement.hierarchy()[static_cast<size_t>(scatter_axis)];
    // Every rank's part of the flat buffer must be the same size.
    std::vector<Shape> local_shapes;
    bool balanced = true;
    for (int rank = 0; rank < node->placement.size(); ++rank) {
      local_shapes.push_back(LocalWindowOf(gradient.type.shape, node->placement, to, rank).shape);
      balanced = balanced && local_shapes[rank].NumElements() == local_shapes[0].NumElements();
    }
    if (!balanced) continue;
    const bool accumulated = graph_.num_micro_batches > 1 && !PerStep(node->gradient);
    Member member;
    member.tensor = node->gradient;
    member.local_elements = local_shapes[0].NumElements();
    // The gradient's own local part (full along the scattered axis): a register lowering made.
    member.packed_elements =
        LocalWindowOf(gradient.type.shape, node->placement, from, 0).shape.NumElements();
    member.local_shapes = std::move(local_shapes);
    member.cache_key = absl::StrCat(node->gradient, "|", node->placement.ToString(), "|",
                                    NdSbpToString(to), accumulated ? "|sum" : "");
    // Already boxed for another reader (gradient clipping): that collective serves.
    if (materialized_.contains(member.cache_key)) continue;
    if (accumulated) {
      absl::StatusOr<std::vector<std::string>> sums = Accumulated(node->gradient);
      if (!sums.ok()) return sums.status();
      member.registers = *sums;
    } else {
      member.registers = local_registers_[node->gradient];
    }
    const std::string group_key = absl::StrCat(
        node->placement.ToString(), "|", NdSbpToString(bucket_from), "|", NdSbpToString(bucket_to));
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
  // A bucket is one tensor: at most the largest a tensor may be (core/tensor.h), whatever the job
  // asks for.
  const int64_t bucket_limit = std::min(graph_.gradient_bucket_bytes, kMaxTensorBytes);
  for (const std::string& key : group_order) {
    Group& group = groups[key];
    std::vector<Member> bucket;
    int64_t bucket_bytes = 0;
    for (size_t i = 0; i <= group.members.size(); ++i) {
      // A gradient's local part is a valid tensor: its float32 bytes fit.
      const int64_t bytes = i < group.members.size() ? group.members[i].packed_elements * 4 : 0;
      // bucket_bytes + bytes > bucket_limit, without a sum that could overflow.
      const bool full = !bucket.empty() && bytes > bucket_limit - bucket_bytes;
      if (i == group.members.size() || full) {
        if (absl::Status status =
                ReduceBucket(group.placement, group.from, group.to, group.shards, bucket);
            !status.ok()) {
          return status;
        }
        bucket.clear();
        bucket_bytes = 0;
      }
      if (i < group.members.size()) {
        bucket.push_back(std::move(group.members[i]));
        bucket_bytes += bytes;
      }
    }
  }
  return absl::OkStatus();
}

// One bucket of BucketGradients: pack (shard by shard when a reduce-scatter splits it in `shards`),
// all-reduce or reduce-scatter, unpack. A bucket of one gradient is left to the ordinary boxing.
template <typename MemberList>
absl::Status GraphLowering::ReduceBucket(const Placement* placement, const NdSbp& from,
                                         const NdSbp& to, int64_t shards,
                                         const MemberList& members) {
  if (members.size() < 2) return absl::OkStatus();
  int64_t elements = 0;
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

}  // namespace loom::compiler
