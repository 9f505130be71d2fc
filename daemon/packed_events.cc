#include "daemon/packed_events.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "daemon/compressed_message.h"
#include "glog/logging.h"
#include "proto/loom/daemon/stored_job.pb.h"

namespace loom::daemon {

std::string PackEvents(HeldEvents* events) {
  PackedJobEvents packed;
  HeldEvents kept;
  for (std::shared_ptr<v1::JobEvent>& event : *events) {
    if (event->has_fetched()) {
      kept.push_back(std::move(event));
    } else {
      // Copied: a watcher's batch may still share the event.
      *packed.add_events() = *event;
    }
  }
  *events = std::move(kept);
  return CompressedMessage(packed);
}

EventList WithPackedEvents(const std::string& packed, EventList events, int64_t from_sequence) {
  PackedJobEvents parsed;
  if (!ParseCompressedMessage(packed, &parsed)) {
    LOG(ERROR) << "a finished job's packed events (" << packed.size()
               << " bytes) do not parse; they are left out";
    return events;
  }
  EventList unpacked;
  for (v1::JobEvent& event : *parsed.mutable_events()) {
    if (event.sequence() < from_sequence) continue;
    unpacked.push_back(std::make_shared<const v1::JobEvent>(std::move(event)));
  }
  EventList merged;
  merged.reserve(unpacked.size() + events.size());
  std::merge(std::make_move_iterator(unpacked.begin()), std::make_move_iterator(unpacked.end()),
             std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()),
             std::back_inserter(merged),
             [](const std::shared_ptr<const v1::JobEvent>& first,
                const std::shared_ptr<const v1::JobEvent>& second) {
               return first->sequence() < second->sequence();
             });
  return merged;
}

}  // namespace loom::daemon
