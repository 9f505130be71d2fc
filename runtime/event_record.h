#ifndef LOOM_RUNTIME_EVENT_RECORD_H_
#define LOOM_RUNTIME_EVENT_RECORD_H_

// The runtime's record of what a job did: ActEvent (one act of one actor, with its start and end)
// and ActorSummary (where one actor's time went: busy, blocked on input or output, waiting for its
// thread). Stream threads and actors fill them; JobRuntime hands them out after the job, for
// traces, tests and job summaries.

#include <cstdint>
#include <string>

#include "proto/plan.pb.h"

namespace loom {

// One act of one actor, in nanoseconds since the job started. The runtime's own record of what
// happened: tests check flow control and overlap against it, traces are drawn from it.
struct ActEvent {
  uint32_t task_index = 0;
  int64_t piece = 0;
  int64_t start_nanoseconds = 0;
  int64_t end_nanoseconds = 0;
};

// Where an actor's time went, from the moment its thread started to the moment it finished.
struct ActorSummary {
  std::string name;
  uint32_t task_index = 0;
  plan::TaskKind kind = plan::TASK_KIND_UNSPECIFIED;
  std::string stream;
  int64_t acts = 0;
  // Running its act (kernel included).
  int64_t busy_nanoseconds = 0;
  // Some input had no READY slot.
  int64_t blocked_on_input_nanoseconds = 0;
  // Inputs were there but some output had no free slot (back-pressure).
  int64_t blocked_on_output_nanoseconds = 0;
  // Able to act but its thread was busy with another actor.
  int64_t waiting_for_thread_nanoseconds = 0;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_EVENT_RECORD_H_
