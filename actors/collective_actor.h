#ifndef LOOM_ACTORS_COLLECTIVE_ACTOR_H_
#define LOOM_ACTORS_COLLECTIVE_ACTOR_H_

// The actor of a COLLECTIVE task: CollectiveActor hands one rank's input and output slots to its
// communicator's CollectiveBackend. It acts only on its turn in the CollectiveTurn it shares with
// the communicator's other collective actors on its stream, so that every rank runs the
// communicator's collectives in the same order.

#include <string>

#include "runtime/actor.h"
#include "runtime/collective_backend.h"
#include "runtime/collective_turn.h"

namespace loom {

// One rank's part of a collective (a COLLECTIVE task): one input register, one output register.
// It acts by handing its READY input slot and a free output slot to its communicator's backend,
// which returns once this rank's output is complete (DESIGN.md §4).
//
// Local order: the collective actors of one communicator on one stream share a CollectiveTurn, and
// an actor acts only on its turn (sequence 0, 1, ..., n-1, 0, ... once per piece each), even when a
// later collective's input is ready first; after acting it passes the turn on and wakes the next
// actor. Every rank follows the same order, so no rank waits in collective A while a peer waits in
// collective B; the backend checks that the ranks agree.
class CollectiveActor final : public Actor {
 public:
  using Actor::Actor;
  absl::Status Initialize() override;
  std::string DescribeWait() const override;

 protected:
  bool CanAct() const override {
    return init().collective_turn->IsTurnOf(task().collective().sequence()) && Actor::CanAct();
  }
  absl::Status DoAct() override;
  // Exhausted when its input ended, or when the communicator's order on this stream ended (a
  // member could never act again when its turn came).
  bool IsExhausted() const override {
    return init().collective_turn->ended() || Actor::IsExhausted();
  }
  absl::Status OnExhausted() override;

 private:
  // Wakes every other member of the turn order (it ended: they are exhausted now).
  void WakeAllMembers();
};

}  // namespace loom

#endif  // LOOM_ACTORS_COLLECTIVE_ACTOR_H_
