#include "kernels/cpu/moe_route_kernel.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kRoute[] = "moe_route";
constexpr char kRouteGrad[] = "moe_route_grad";

// The `k` largest of p[0, experts) in order (ties to the lower index).
std::array<int64_t, 2> TopExperts(const float* p, int64_t experts, int64_t k) {
  std::array<int64_t, 2> top = {-1, -1};
  for (int64_t rank = 0; rank < k; ++rank) {
    int64_t best = -1;
    for (int64_t e = 0; e < experts; ++e) {
      if (e == top[0]) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    top[rank] = best;
  }
  return top;
}

float ChosenSum(const float* p, const std::array<int64_t, 2>& top, int64_t k) {
  float sum = 0;
  for (int64_t rank = 0; rank < k; ++rank) sum += p[top[rank]];
  return sum;
}

// The renormalised weight p_e / sum of a token's chosen p: exactly 1 for k = 1.
float ChosenWeight(const float* p, int64_t e, float sum, int64_t k) {
  return k == 1 ? 1.0f : p[e] / sum;
}

absl::StatusOr<int64_t> ReadK(const char* op_type, const KernelInit& init, int64_t experts) {
  absl::StatusOr<int64_t> k = Attributes(*init.conf).GetInt("k");
  if (!k.ok()) return WithOpType(op_type, k.status());
  if ((*k != 1 && *k != 2) || *k > experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": attribute 'k' must be 1 or 2 and at most the ", experts, " experts, not ", *k));
  }
  return k;
}

// The extents of probs [B, T, E] and of slots [B, E, C].
struct RouteExtents {
  RouteExtents(const plan::TensorDesc& probs, const plan::TensorDesc& slots)
      : groups(Shape::FromProto(probs).dimension(0)),
        tokens(Shape::FromProto(probs).dimension(1)),
        experts(Shape::FromProto(probs).dimension(2)),
        capacity(Shape::FromProto(slots).dimension(2)) {}

  int64_t groups, tokens, experts, capacity;
};

class MoeRouteKernel final : public Kernel {
 public:
  MoeRouteKernel(const KernelInit& init, int64_t k)
      : signature_(init),
        k_(k),
        extents_(init.inputs[0], init.outputs[0]),
        choices_(extents_.tokens),
        weights_(extents_.tokens * 2),
        filled_(extents_.experts) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kRoute, context); !status.ok()) return status;
    const float* probs = context.inputs[0].Data<const float>();
    int32_t* slot_token = context.outputs[0].Data<int32_t>();
    float* slot_weight = context.outputs[1].Data<float>();
    float* expert_fraction = context.outputs[2].Data<float>();
    float* dropped = context.outputs[3].Data<float>();
    for (int64_t b = 0; b < extents_.groups; ++b) {
      const float* group = probs + b * extents_.tokens * extents_.experts;
      int32_t* tokens_of_slots = slot_token + b * extents_.experts * extents_.capacity;
      float* weights_of_slots = slot_weight + b * extents_.experts * extents_.capacity;
      float* fraction = expert_fraction + b * extents_.experts;
      std::fill(tokens_of_slots, tokens_of_slots + extents_.experts * extents_.capacity, -1);
      std::fill(weights_of_slots, weights_of_slots + extents_.experts * extents_.capacity, 0.0f);
      std::fill(fraction, fraction + extents_.experts, 0.0f);
      std::fill(filled_.begin(), filled_.end(), 0);
      for (int64_t t = 0; t < extents_.tokens; ++t) {
        const float* p = group + t * extents_.experts;
        choices_[t] = TopExperts(p, extents_.experts, k_);
        const float sum = ChosenSum(p, choices_[t], k_);
        for (int64_t rank = 0; rank < k_; ++rank) {
          weights_[t * 2 + rank] = ChosenWeight(p, choices_[t][rank], sum, k_);
          fraction[choices_[t][rank]] += 1.0f;
        }
      }
      int64_t over_capacity = 0;
      for (int64_t rank = 0; rank < k_; ++rank) {
        for (int64_t t = 0; t < extents_.tokens; ++t) {
          const int64_t e = choices_[t][rank];
          if (filled_[e] == extents_.capacity) {
            ++over_capacity;
            continue;
          }
          const int64_t slot = e * extents_.capacity + filled_[e]++;
          tokens_of_slots[slot] = static_cast<int32_t>(t);
          weights_of_slots[slot] = weights_[t * 2 + rank];
        }
      }
      const float assignments = static_cast<float>(k_ * extents_.tokens);
      for (int64_t e = 0; e < extents_.experts; ++e) fraction[e] /= assignments;
      dropped[b] = static_cast<float>(over_capacity);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t k_;
  RouteExtents extents_;
  // Scratch of one group, kept between acts: each token's choices and weights, each expert's
  // filled slots.
  std::vector<std::array<int64_t, 2>> choices_;
  std::vector<float> weights_;
  std::vector<int64_t> filled_;
};

class MoeRouteGradKernel final : public Kernel {
 public:
  MoeRouteGradKernel(const KernelInit& init, int64_t k)
      : signature_(init), k_(k), extents_(init.inputs[0], init.inputs[1]) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kRouteGrad, context); !status.ok()) return status;
    const float* probs = context.inputs[0].Data<const float>();
    const int32_t* slot_token = context.inputs[1].Data<const int32_t>();
    const float* dweight = context.inputs[2].Data<const float>();
    float* dprobs = context.outputs[0].Data<float>();
    std::fill(dprobs, dprobs + extents_.groups * extents_.tokens * extents_.experts, 0.0f);
    for (int64_t b = 0; b < extents_.groups; ++b) {
      for (int64_t e = 0; e < extents_.experts; ++e) {
        for (int64_t c = 0; c < extents_.capacity; ++c) {
          const int64_t slot = (b * extents_.experts + e) * extents_.capacity + c;
          const int64_t t = slot_token[slot];
          if (t == -1) continue;
          if (t < -1 || t >= extents_.tokens) {
            return absl::InvalidArgumentError(absl::StrCat(
                kRouteGrad, ": slot_token[", b, ", ", e, ", ", c, "] = ", t,
                " is not a token of the group (0 to ", extents_.tokens - 1, ") or -1"));
          }
          const float* p = probs + (b * extents_.tokens + t) * extents_.experts;
          float* dp = dprobs + (b * extents_.tokens + t) * extents_.experts;
          const std::array<int64_t, 2> top = TopExperts(p, extents_.experts, k_);
          const float sum = ChosenSum(p, top, k_);
          // d(p_e / s) / dp_j = ([j == e] - w_e) / s: exactly 0 for k = 1, where w_e = 1.
          const float weight = ChosenWeight(p, e, sum, k_);
          const float dw = dweight[slot];
          for (int64_t rank = 0; rank < k_; ++rank) {
            const int64_t j = top[rank];
            dp[j] += dw * ((j == e ? 1.0f : 0.0f) - weight) / sum;
          }
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t k_;
  RouteExtents extents_;
};

// probs float32 [B, T, E]; `slots` more tensors [B, E, C] (capacity C >= 0).
absl::Status CheckRouteShapes(const char* op_type, const plan::TensorDesc& probs_desc,
                              std::initializer_list<const plan::TensorDesc*> slots) {
  if (absl::Status status = CheckDataType(op_type, "input 'probs'", probs_desc, plan::FLOAT32);
      !status.ok()) {
    return status;
  }
  const Shape probs = Shape::FromProto(probs_desc);
  if (probs.rank() != 3 || probs.dimension(2) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": probs must be [groups, tokens, experts], not ", DescribeTensor(probs_desc)));
  }
  for (const plan::TensorDesc* desc : slots) {
    const Shape shape = Shape::FromProto(*desc);
    if (shape.rank() != 3 || shape.dimension(0) != probs.dimension(0) ||
        shape.dimension(1) != probs.dimension(2)) {
      return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", DescribeTensor(*desc),
                                                     " must be [groups, experts, capacity] of "
                                                     "probs ",
                                                     DescribeTensor(probs_desc)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteKernel(const KernelInit& init) {
  if (absl::Status status = CheckArity(kRoute, init, 1, 4); !status.ok()) return status;
  if (absl::Status status =
          CheckRouteShapes(kRoute, init.inputs[0], {&init.outputs[0], &init.outputs[1]});
      !status.ok()) {
    return status;
  }
  const Shape probs = Shape::FromProto(init.inputs[0]);
  const Shape slots = Shape::FromProto(init.outputs[0]);
  if (Shape::FromProto(init.outputs[1]) != slots ||
      Shape::FromProto(init.outputs[2]) != Shape({probs.dimension(0), probs.dimension(2)}) ||
      Shape::FromProto(init.outputs[3]) != Shape({probs.dimension(0)})) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRoute, ": outputs must be [B, E, C] x2, [B, E] and [B] for probs ",
                     DescribeTensor(init.inputs[0])));
  }
  for (int output : {1, 2, 3}) {
    if (absl::Status status = CheckDataType(kRoute, "output", init.outputs[output], plan::FLOAT32);
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status =
          CheckDataType(kRoute, "output 'slot_token'", init.outputs[0], plan::INT32);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> k = ReadK(kRoute, init, probs.dimension(2));
  if (!k.ok()) return k.status();
  return std::make_unique<MoeRouteKernel>(init, *k);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteGradKernel(const KernelInit& init) {
  if (absl::Status status = CheckArity(kRouteGrad, init, 3, 1); !status.ok()) return status;
  if (absl::Status status =
          CheckRouteShapes(kRouteGrad, init.inputs[0], {&init.inputs[1], &init.inputs[2]});
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckDataType(kRouteGrad, "input 'slot_token'", init.inputs[1], plan::INT32);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckDataType(kRouteGrad, "input 'dslot_weight'", init.inputs[2], plan::FLOAT32);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckSameShape(kRouteGrad, "input 'probs'", Shape::FromProto(init.inputs[0]), "output",
                         Shape::FromProto(init.outputs[0]));
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckDataType(kRouteGrad, "output", init.outputs[0], plan::FLOAT32);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> k =
      ReadK(kRouteGrad, init, Shape::FromProto(init.inputs[0]).dimension(2));
  if (!k.ok()) return k.status();
  return std::make_unique<MoeRouteGradKernel>(init, *k);
}

}  // namespace loom::cpu
