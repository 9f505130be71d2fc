#ifndef LOOM_RUNTIME_JOB_OPTIONS_H_
#define LOOM_RUNTIME_JOB_OPTIONS_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "proto/plan.pb.h"
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
};

}  // namespace loom

#endif  // LOOM_RUNTIME_JOB_OPTIONS_H_
