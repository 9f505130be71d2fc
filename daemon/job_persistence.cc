#include "daemon/job_persistence.h"

#include <utility>

#include "daemon/packed_events.h"

namespace loom::daemon {

StoredJob StoredJobOf(const JobRecord& record, bool with_step_events) {
  StoredJob stored;
  stored.set_number(record.number);
  *stored.mutable_info() = record.info;
  EventList events(record.events.begin(), record.events.end());
  if (record.packed_events != nullptr) {
    events = WithPackedEvents(*record.packed_events, std::move(events), 0);
  }
  for (const std::shared_ptr<const v1::JobEvent>& event : events) {
    if (event->has_fetched() || (!with_step_events && event->has_step())) continue;
    *stored.add_events() = *event;
  }
  stored.set_next_sequence(record.next_sequence);
  stored.set_has_trace(record.trace_stored);
  stored.set_trace_acts(record.trace_acts);
  stored.set_trace_error(record.trace_error);
  return stored;
}

std::shared_ptr<JobRecord> RestoredRecordOf(StoredJob stored) {
  auto record = std::make_shared<JobRecord>();
  record->number = stored.number();
  record->id = stored.info().job_id();
  record->info = std::move(*stored.mutable_info());
  record->info.clear_queue_position();
  for (v1::JobEvent& event : *stored.mutable_events()) {
    record->events.push_back(std::make_shared<v1::JobEvent>(std::move(event)));
  }
  record->next_sequence = stored.next_sequence();
  record->trace = record->info.traced();
  record->restored = true;
  // Fetched tensors are held in memory only.
  if (record->info.streams_fetches()) record->info.set_fetches_released(true);
  record->trace_stored = stored.has_trace();
  record->trace_acts = stored.trace_acts();
  record->trace_error = stored.trace_error();
  return record;
}

}  // namespace loom::daemon
