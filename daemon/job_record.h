#ifndef LOOM_DAEMON_JOB_RECORD_H_
#define LOOM_DAEMON_JOB_RECORD_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "client/loomctl/compile_command.h"
#include "proto/loom/v1/job_service.pb.h"
#include "runtime/job_runtime.h"

namespace loom::daemon {

// What the coordinator holds of one job. Guarded by the JobManager's mutex.
struct JobRecord {
  // "job-<number>"; numbers grow from 1 in submission order.
  std::string id;
  int64_t number = 0;
  std::unique_ptr<loomctl::CompiledJob> compiled;
  // Kept current; queue_position is filled in when the record is read.
  v1::JobInfo info;
  // The events still held (state changes always; the newest step events), in sequence order.
  std::deque<v1::JobEvent> events;
  int64_t next_sequence = 0;
  // Set by CancelJob while the job launches or runs: the job ends CANCELLED with this message.
  bool cancel_requested = false;
  std::string cancel_message;
  // Set while the job's runtime exists and was started, for CancelJob to abort it.
  std::shared_ptr<JobRuntime> runtime;
};

inline bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_RECORD_H_
