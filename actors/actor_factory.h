#ifndef LOOM_ACTORS_ACTOR_FACTORY_H_
#define LOOM_ACTORS_ACTOR_FACTORY_H_

// The actor factory of the standard actor kinds: MakeActorFactory maps each task kind (compute,
// source, sink, copy, unpack, repeat, accumulate, collective, variable, send, receive) to its actor
// class, for JobRuntime::Create. Used wherever a node runs a plan: loomd's node jobs, local runs,
// `loomctl run-plan`, tests and benchmarks.

#include "runtime/job_runtime.h"

namespace loom {

// Builds the standard actor kinds (compute, source, sink, copy, unpack, repeat, accumulate,
// collective, variable) from their tasks.
ActorFactory MakeActorFactory();

}  // namespace loom

#endif  // LOOM_ACTORS_ACTOR_FACTORY_H_
