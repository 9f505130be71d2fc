#ifndef LOOM_RUNTIME_JOB_OPTIONS_H_
#define LOOM_RUNTIME_JOB_OPTIONS_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"
#include "runtime/stream_context.h"

namespace loom {

struct JobOptions {
  // A job in which no actor has acted or received a message for this long, with no kernel
  // running, has stalled: it ends with a report of what every actor waits for.
  absl::Duration stall_timeout = absl::Seconds(10);
  // A stream thread with nothing to do polls its inbox this long before it parks.
  absl::Duration spin_before_park = absl::Microseconds(50);
  // Keep an ActEvent per act (for traces and tests). Costs a few bytes per act.
  bool record_events = true;
  // Builds the context of each stream. Unset: CPU streams are synchronous; other device types are
  // rejected. The CUDA backend (and tests of the asynchronous path) supply their own.
  std::function<std::unique_ptr<StreamContext>(const plan::Stream&)> stream_context_factory;
  // How long a rank waits in a collective for its peers (to arrive, and to finish) before the job
  // fails with DEADLINE_EXCEEDED naming the collective and the missing ranks. A rank waiting in a
  // collective is busy, not stalled, so this (not stall_timeout) bounds such waits.
  absl::Duration collective_timeout = absl::Seconds(60);
  // Builds the backend of each communicator in Plan.communicators. Unset, or returning null: a
  // communicator whose devices are all CPU devices of this node gets the shared-memory backend,
  // and any other is rejected (FAILED_PRECONDITION). The cluster supplies UCX and NCCL backends.
  std::function<absl::StatusOr<std::unique_ptr<CollectiveBackend>>(const plan::Communicator&,
                                                                   const plan::Plan&)>
      collective_backend_factory;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_JOB_OPTIONS_H_
