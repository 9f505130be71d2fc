#ifndef LOOM_ACTORS_COMPUTE_ACTOR_H_
#define LOOM_ACTORS_COMPUTE_ACTOR_H_

// The actors that run a kernel: ComputeActor (a COMPUTE task, one kernel call per piece, the kernel
// built from the node's KernelRegistry in Initialize) and SourceActor (a SOURCE task: a compute
// actor without inputs that emits the task's number of pieces).

#include <memory>
#include <vector>

#include "kernels/kernel.h"
#include "runtime/actor.h"

namespace loom {

// Runs its kernel once per piece: one READY slot of every input -> one slot of every output.
// The piece it produces is the piece of its first input (its act count when it has none). The
// task's ordering inputs (Task.ordering_inputs) are waited for and returned, not given to the
// kernel.
class ComputeActor : public Actor {
 public:
  using Actor::Actor;
  absl::Status Initialize() override;

 protected:
  absl::Status DoAct() override;

 private:
  std::unique_ptr<Kernel> kernel_;
  std::vector<TensorView> input_views_;
  std::vector<TensorView> output_views_;
};

// A compute actor without inputs that emits `num_pieces` pieces, its kernel filling each.
class SourceActor final : public ComputeActor {
 public:
  using ComputeActor::ComputeActor;

 protected:
  bool IsExhausted() const override { return act_count() >= task().num_pieces(); }
};

}  // namespace loom

#endif  // LOOM_ACTORS_COMPUTE_ACTOR_H_
