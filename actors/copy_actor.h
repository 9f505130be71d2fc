#ifndef LOOM_ACTORS_COPY_ACTOR_H_
#define LOOM_ACTORS_COPY_ACTOR_H_

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
