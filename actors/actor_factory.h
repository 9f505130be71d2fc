#ifndef LOOM_ACTORS_ACTOR_FACTORY_H_
#define LOOM_ACTORS_ACTOR_FACTORY_H_

#include "runtime/job_runtime.h"

namespace loom {

// Builds the standard actor kinds (compute, source, sink, copy, unpack, repeat, accumulate,
// collective, variable) from their tasks.
ActorFactory MakeActorFactory();

}  // namespace loom

#endif  // LOOM_ACTORS_ACTOR_FACTORY_H_
