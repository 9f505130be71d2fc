#ifndef LOOM_DAEMON_JOB_RECORD_H_
#define LOOM_DAEMON_JOB_RECORD_H_

// JobRecord: what the coordinator holds of one job (its info, compiled or compressed plan, events,
// each node's progress while it launches and runs, periodic checkpoint parts and trace), kept by
// the JobManager and guarded by its mutex. Also IsTerminal, whether a job state is an end.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "compiler/compile_for_devices.h"
#include "daemon/packed_events.h"
#include "daemon/trace_parts.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// What the coordinator holds of one job. Guarded by the JobManager's mutex.
struct JobRecord {
  // "job-<number>"; numbers grow from 1 in submission order.
  std::string id;
  int64_t number = 0;
  // Until the job ended (then it goes, with the job and logical graph it holds: several MB for a
  // small model, which the finished jobs kept would hold), and null for a restored job. Never
  // changes once queued: shared with whoever copies or writes the plan outside the lock.
  std::shared_ptr<const compiler::CompiledJob> compiled;
  // Once `compiled` went, without a data directory: its GetPlanResponse, compressed
  // (compressed_message.h: a fraction of the parsed size), shared with GetPlan's readers. With
  // one, GetPlan reads it from there.
  std::shared_ptr<const std::string> plan_bytes;
  // Restored from the data directory (it ended before the restart).
  bool restored = false;
  // Kept current; queue_position is filled in when the record is read.
  v1::JobInfo info;
  // The events still held (state changes always; the newest step events; fetched tensors until
  // released), in sequence order. Shared with the watchers' batches (JobManager::EventBatch): an
  // event does not change once the caller of AppendEvent filled it in. Once the job ended, only
  // its fetched tensors: the others are in `packed_events`.
  HeldEvents events;
  // Once the job ended: its other events, packed (PackEvents). Shared with the watchers reading
  // them outside the lock.
  std::shared_ptr<const std::string> packed_events;
  // Of `events`, the fetched tensors.
  int64_t fetched_events = 0;
  int64_t next_sequence = 0;
  // Set by CancelJob while the job launches or runs: the job ends CANCELLED with this message.
  bool cancel_requested = false;
  std::string cancel_message;
  // While the job launches and runs: what each of its nodes reported (by node index).
  struct NodeProgress {
    bool launched = false;
    std::string address;  // its UCX address for the job
    // What its communicators spanning nodes need (NodeLaunched.communicator_ids).
    std::map<std::string, std::string> communicator_ids;
    bool connected = false;
    bool ended = false;
    absl::Status status;  // when ended
    // The peers it could not reach while connecting (node -> why).
    std::map<int, std::string> unreachable;
  };
  std::vector<NodeProgress> nodes;
  // The first failure on any node (the job's error), set once.
  absl::Status first_error;
  // Submitted with `trace` (set once, before the record is shared): the nodes record their acts
  // and send them (Chrome trace events) before they end.
  bool trace = false;
  // Submitted with a checkpoint path (set once, as `trace`): where its variables are saved when it
  // succeeds (job_checkpoint.h); empty: nowhere.
  std::string checkpoint_path;
  // Pending: its record is on disk (or there is no store), so it may run (under the manager's
  // lock).
  bool stored = true;
  // SubmitJobRequest.overwrite_checkpoint.
  bool overwrite_checkpoint = false;
  // And every so many steps while it runs (set once, as `trace`); 0: only at the end.
  int64_t checkpoint_every_steps = 0;
  // Submitted with stream_fetches (set once, as `trace`).
  bool stream_fetches = false;
  // While it runs: the nodes that reported their part of the periodic checkpoint after a step, by
  // step (JobManager::RunAndSaveCheckpoints assembles a step once every node with variables did).
  std::map<int64_t, std::set<int>> checkpoint_parts;
  // While it runs: each node's trace events (by node). Once it ended: the merged trace, in
  // compressed chunks (trace_parts.h), in `packed_trace`; with a data directory only there
  // (trace_stored), where GetTrace reads it.
  std::map<int, std::string> trace_events;
  // The nodes whose whole trace came (its last part, or its error).
  std::set<int> traced_nodes;
  // The merged trace was kept (packed_trace or trace_stored): parts still arriving are dropped.
  bool trace_kept = false;
  // Its packed trace was dropped to keep the coordinator under --max-kept-trace-bytes.
  bool trace_dropped = false;
  std::shared_ptr<const PackedTrace> packed_trace;
  int64_t trace_acts = 0;
  // A node's trace did not fit in a message: why (GetTrace then fails with it).
  std::string trace_error;
  // The data directory holds its merged trace (written when it ended).
  bool trace_stored = false;
  // When the record was last written to the data directory.
  absl::Time persisted = absl::InfinitePast();
};

inline bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_RECORD_H_
