#ifndef LOOM_ACTORS_COPY_ACTOR_H_
#define LOOM_ACTORS_COPY_ACTOR_H_

// The actor of a COPY task: CopyActor moves each piece into a register on another device of the
// same node with its stream's Copy (a memcpy on a CPU stream, an enqueued device copy on a CUDA
// stream) and counts the bytes as "local" transfers in the job's metrics.

#include "runtime/actor.h"

namespace loom {

// Copies each input piece into a register on another device of the node. Between CPU devices this
// is a memcpy; the CUDA backend brings device copies.
class CopyActor final : public Actor {
 public:
  using Actor::Actor;
  absl::Status Initialize() override;

 protected:
  absl::Status DoAct() override;
};

}  // namespace loom

#endif  // LOOM_ACTORS_COPY_ACTOR_H_
