#ifndef LOOM_RUNTIME_COLLECTIVE_BACKEND_H_
#define LOOM_RUNTIME_COLLECTIVE_BACKEND_H_

// The interface between collective actors and what moves a collective's data: CollectiveCall (one
// rank's part of one collective) and CollectiveBackend (Run, Abort, and the joining of ranks on
// several nodes), with the contract every backend keeps. The backends are in runtime/collectives/
// (shared memory, network, NCCL); JobRuntime makes one per communicator.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom {

// One rank's part of one collective: what a collective actor hands its communicator's backend.
// The views stay valid (and untouched by anyone else) until Run returns.
struct CollectiveCall {
  int rank = 0;
  const plan::CollectiveConf* conf = nullptr;
  // The piece being reduced or moved, for error messages.
  int64_t piece = 0;
  TensorView input;
  TensorView output;
};

// The transport of one communicator's collectives (DESIGN.md §4). The shared-memory backend serves
// ranks that are threads of this process; the cluster brings UCX (CPU) and NCCL (GPU) backends
// behind the same interface. One backend per communicator per job; every rank of the
// communicator on this node calls Run from its own communication stream thread.
//
// Contract:
//  - Run blocks until this rank's output is complete and no peer will read this rank's input or
//    write its output any more. Calls of one rank come in the communicator's global order (the
//    collective actors enforce it); the backend checks that all ranks run the same collective and
//    fails with INTERNAL, naming both collectives and ranks, when they do not.
//  - Every wait ends: Abort wakes it (JobRuntime::Fail aborts every backend), and a wait longer
//    than the backend's timeout fails with DEADLINE_EXCEEDED naming the collective and the ranks
//    that did not arrive. After an abort or a failure every Run fails at once.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;

  // The communicator's name and size (number of ranks).
  virtual const std::string& communicator() const = 0;
  virtual int size() const = 0;
  // What carries the data, a metrics label ("shared_memory", "network", "nccl").
  virtual absl::string_view transport() const = 0;

  virtual absl::Status Run(const CollectiveCall& call) = 0;
  // Fails every pending and future Run (any thread may call it; the first reason is kept), and
  // ends a FinishJoin.
  virtual void Abort(absl::Status reason) = 0;

  // Joining, for a backend whose ranks on several nodes must share an identifier before the job
  // starts (NCCL's unique id); the others keep these defaults. JobRuntime::JoinCommunicators:
  //  - join_id(): on the node of rank 0, the identifier (made when the backend was); empty on the
  //    other nodes and for backends that need none. The coordinator hands it to every node.
  //  - StartJoin(id), on every node, with rank 0's identifier (empty when none came): begins
  //    joining this node's ranks and returns at once, so that every communicator of the node is
  //    joining before the node waits for any (the nodes may list them in different orders).
  //  - FinishJoin(deadline): waits until every rank of every node joined; DEADLINE_EXCEEDED
  //    naming the communicator at `deadline`, or the reason of an Abort. After a failed join
  //    (the backends aborted), every backend gets FinishJoin(InfinitePast()): one still joining
  //    ends its join then, whether or not it was started or waited for before.
  virtual std::string join_id() const { return std::string(); }
  virtual absl::Status StartJoin(const std::string& /*id*/) { return absl::OkStatus(); }
  virtual absl::Status FinishJoin(absl::Time /*deadline*/) { return absl::OkStatus(); }
};

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVE_BACKEND_H_
