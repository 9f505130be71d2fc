#ifndef LOOM_DAEMON_PACKED_EVENTS_H_
#define LOOM_DAEMON_PACKED_EVENTS_H_

// How the coordinator holds a job's events: HeldEvents while the job runs, and once it ended its
// events packed into one compressed string (PackEvents), which WithPackedEvents merges back into
// what a watcher reads. Fetched tensors stay unpacked, to be released as a whole later.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// A job's events as the coordinator holds them: each parsed, in sequence order.
using HeldEvents = std::deque<std::shared_ptr<v1::JobEvent>>;

// A finished job's events, serialized and compressed (compressed_message.h), for a coordinator
// that remembers up to --max-finished-jobs jobs of up to --max-events-per-job events each. (Sizes:
// docs/ARCHITECTURE.md, "The cluster", *What the coordinator holds of its jobs*.) Returns every
// event of `events` but the fetched tensors (large, and released as a whole later), packed; those
// leave `events`.
std::string PackEvents(HeldEvents* events);

// `events` (in sequence order) with the events of `packed` (from PackEvents) from
// `from_sequence` on merged in, in sequence order. Packed bytes that do not parse (the coordinator
// wrote them itself: short of memory corruption this cannot happen) add nothing, and are logged.
using EventList = std::vector<std::shared_ptr<const v1::JobEvent>>;
EventList WithPackedEvents(const std::string& packed, EventList events, int64_t from_sequence);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_PACKED_EVENTS_H_
