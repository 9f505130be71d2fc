#ifndef LOOM_ACTORS_VARIABLE_ACTOR_H_
#define LOOM_ACTORS_VARIABLE_ACTOR_H_

// The actor of a VARIABLE task: VariableActor holds a model variable's value in the one slot of its
// output register and its optimizer states in buffers of its own, initializes them in act 0, runs
// the optimizer in place on each step's gradient, and makes the host copies (VariableHolder) behind
// periodic snapshots and the final checkpoint.

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "runtime/actor.h"
#include "runtime/variable_snapshot.h"

namespace loom {

// A model variable (plan::VARIABLE). Its value lives in the one slot of its output register and
// persists across steps:
//   act 0       runs the initializer into the slot and publishes it as piece 0;
//   act k >= 1  (with a gradient input) waits for gradient k-1 and for every reader to return the
//               slot, runs the optimizer in place (piece k-1: update number k), and publishes the
//               value as piece k, except after the last step's gradient, when it only updates;
//   act k >= 1  (without a gradient input) republishes the value once the slot is back.
// With snapshots (ActorInit::snapshot_every_steps), act k >= 1 with k a multiple of it and k below
// the step count also hands a host copy of the value and states, after step k, to the callback.
// Optimizer states (moments) are buffers of the value's shape owned by the actor: zero at first,
// or, when the task has state_initializers (one per state; a job resumed from a checkpoint), filled
// by them in act 0 right after the initializer.
class VariableActor final : public Actor, public VariableHolder {
 public:
  using Actor::Actor;
  ~VariableActor() override;

  absl::Status Initialize() override;

  // The value and the optimizer states, in the memory of the actor's device. Read them only when
  // no act can run (after the job), through CopyToHost when the device may be a GPU.
  TensorView value() const;
  const std::vector<TensorView>& states() const { return states_; }
  // A host copy of `view` (the value or a state), made on the actor's stream and waited for.
  absl::StatusOr<HostTensor> CopyToHost(const TensorView& view) const;
  // Host copies of the value and every state, as CopyToHost makes them.
  absl::StatusOr<VariableOnHost> CopyVariableToHost() const override;

 protected:
  bool CanAct() const override;
  absl::Status DoAct() override;
  bool IsExhausted() const override;

 private:
  bool has_gradient() const { return num_inputs() == 1; }
  int64_t steps() const { return task().num_pieces(); }
  // After the act that left the value as it is after `step` steps: the snapshot, when one is due.
  absl::Status MaybeSnapshot(int64_t step) const;

  std::unique_ptr<Kernel> initializer_;
  // One per optimizer state, or none (the states stay zero).
  std::vector<std::unique_ptr<Kernel>> state_initializers_;
  std::unique_ptr<Kernel> optimizer_;
  std::vector<TensorView> states_;
  std::vector<TensorView> optimizer_inputs_;
  std::vector<TensorView> optimizer_outputs_;
};

}  // namespace loom

#endif  // LOOM_ACTORS_VARIABLE_ACTOR_H_
