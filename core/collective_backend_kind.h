#ifndef LOOM_CORE_COLLECTIVE_BACKEND_KIND_H_
#define LOOM_CORE_COLLECTIVE_BACKEND_KIND_H_

// CollectiveBackendKind, the backend that runs a communicator's collectives (shared memory, network
// or NCCL), and CollectiveBackendKindOf, which picks it from where the communicator's ranks are.
// JobRuntime builds the backend it names and the compiler's memory estimate counts what that
// backend holds.

#include "proto/plan.pb.h"

namespace loom {

// Which backend runs the collectives of a communicator. JobRuntime builds it
// (runtime/job_runtime.cc) and the compiler's memory estimate counts what it holds
// (compiler/memory_plan.cc); both ask CollectiveBackendKindOf, so they cannot disagree.
enum class CollectiveBackendKind {
  // Every rank is a CPU device of one node: threads of one process meet in shared memory.
  kSharedMemory,
  // The ranks live on more than one node and are not all GPUs: network collectives
  // (runtime/collectives/network_collectives.h), which move host memory and stage what cannot move
  // in place.
  kNetwork,
  // Every rank is a CUDA device: NCCL (runtime/collectives/nccl_collectives.h).
  kNccl,
};

// The backend of `communicator` by where its ranks are. A communicator the chosen backend cannot
// serve (a CPU rank beside GPU ranks; ranks of another node without a network) is refused when the
// backend is built, naming the rank.
CollectiveBackendKind CollectiveBackendKindOf(const plan::Communicator& communicator);

}  // namespace loom

#endif  // LOOM_CORE_COLLECTIVE_BACKEND_KIND_H_
