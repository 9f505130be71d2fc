#ifndef LOOM_DAEMON_JOB_MANAGER_H_
#define LOOM_DAEMON_JOB_MANAGER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/cluster.h"
#include "daemon/fetch_stream.h"
#include "daemon/job_admission.h"
#include "daemon/job_record.h"
#include "daemon/job_store.h"
#include "daemon/job_store_writer.h"
#include "daemon/metrics.h"
#include "daemon/step_tracker.h"
#include "proto/job.pb.h"
#include "proto/loom/v1/job_service.pb.h"
#include "proto/loom/v1/node_service.pb.h"

namespace loom::daemon {

// SubmitJobRequest's fields besides the job.
struct SubmitOptions {
  // Every node records every act, for GetTrace.
  bool trace = false;
  // With trace: only the acts of these steps (SubmitJobRequest.trace_steps); unset: every step.
  std::optional<v1::StepRange> trace_steps;
  // When the job succeeds its variables are saved here (job_checkpoint.h); empty: nowhere.
  std::string checkpoint_path;
  // With checkpoint_path: also every this many steps while the job runs; 0: only at the end.
  int64_t checkpoint_every_steps = 0;
  // Its fetched tensors go to its watchers (SubmitJobRequest.stream_fetches, FetchStream).
  bool stream_fetches = false;
};

// The job lifecycle on the coordinator (DESIGN.md §1): admits and compiles submitted jobs for the
// cluster's devices, queues them first in, first out, and runs one at a time (a worker thread of
// its own) on the nodes it needs: launch (each node builds its actors and opens its network),
// connect (every node gets every node's address; a barrier), start, wait for every node's end,
// release. A failure on any node, a lost node or a cancellation aborts the job on every node.
// Records every job's events (state changes; step events from the loss's sinks, which their
// nodes forward) for watchers.
//
// Thread-safe: every method may be called from any thread (the gRPC handlers').
class JobManager {
 public:
  struct Options {
    absl::Duration stall_timeout = absl::Seconds(10);
    // How long the nodes may take to launch a job, and to connect.
    absl::Duration launch_timeout = absl::Seconds(60);
    // While connecting, how long each node waits for a probe from every peer: a node that cannot
    // reach another fails the launch (naming them) instead of the job's first transfer.
    absl::Duration probe_timeout = absl::Seconds(5);
    // After a failure, how long the other nodes may take to end their part.
    absl::Duration abort_timeout = absl::Seconds(10);
    // Jobs that may wait in the queue (each holds its compiled plans); Submit refuses more.
    int max_pending_jobs = 1000;
    // The most tasks a job's plan may have (compiler::CompileOptions::max_tasks), and the waiting
    // jobs' plans together; 0: no limit.
    int64_t max_plan_tasks = 2'000'000;
    // compiler::CompileOptions::threads; 0: the machine's hardware threads.
    int compile_threads = 0;
    int max_finished_jobs = 1000;
    // Step and checkpoint events held per job (the oldest go first; state changes and fetched
    // tensors do not count).
    int max_events_per_job = 10000;
    // A job that streams its fetches: the most bytes of fetched tensors it may stream in all
    // (loomd --max-fetched-bytes). A piece may take half of the smallest message limit of the
    // coordinator and the job's nodes (Cluster::MessageLimit).
    int64_t max_fetched_bytes_per_job = int64_t{256} << 20;
    // Without a store: the most bytes of finished jobs' packed traces kept; the oldest are dropped
    // first (GetTrace then says so), the newest is kept whatever its size.
    int64_t max_kept_trace_bytes = int64_t{1} << 30;
    // Jobs' ends and steps are counted here (may be null); it must outlive the manager.
    DaemonMetrics* metrics = nullptr;
    // Where jobs are kept across restarts (loomd --data-dir); null: in memory only. It must
    // outlive the manager.
    const JobStore* store = nullptr;
  };

  // `cluster` must outlive the manager.
  JobManager(Options options, Cluster* cluster);
  // Shutdown(zero grace) when it was not called.
  ~JobManager();

  // Restores the jobs of the store (those that had not ended fail: the coordinator restarted
  // under them), then starts the worker thread.
  void Start();
  // Stops taking jobs (Submit: UNAVAILABLE), cancels the pending ones, lets the running one go on
  // for `grace`, then cancels it, and joins the worker. Returns when no job runs.
  void Shutdown(absl::Duration grace);

  // Admits (AdmitJob's errors; CheckCheckpointPath's for a checkpoint path), then queues the job.
  // UNAVAILABLE while shutting down.
  absl::StatusOr<v1::JobInfo> Submit(job::Job job, const SubmitOptions& options = {});
  // NOT_FOUND for an unknown (or forgotten) id.
  absl::StatusOr<v1::JobInfo> Get(const std::string& job_id) const;
  // Jobs in `states` (empty: every job), oldest first, from the first one submitted after the job
  // numbered `after` (0: from the oldest), at most `limit` of them (0: every one). `more` (when
  // not null) says whether jobs in `states` follow the last one returned.
  std::vector<v1::JobInfo> List(const std::vector<v1::JobState>& states, int64_t after = 0,
                                int limit = 0, bool* more = nullptr) const;
  // The bytes kept for the finished jobs remembered (--max-finished-jobs), by what they hold:
  // their plans, events and traces (compressed), and the fetched tensors of a job that streamed
  // them, until released. What a metric shows operators of the coordinator's job history.
  struct HistoryBytes {
    int64_t plans = 0;
    int64_t events = 0;
    int64_t traces = 0;
    int64_t fetched = 0;
  };
  HistoryBytes FinishedJobsBytes() const;
  // A pending job ends CANCELLED at once; a running one is aborted, and the call waits up to
  // `timeout` for it to end. Cancelling a cancelled job returns it; a succeeded or failed one is
  // FAILED_PRECONDITION; an unknown id NOT_FOUND.
  absl::StatusOr<v1::JobInfo> Cancel(const std::string& job_id, const std::string& reason,
                                     absl::Duration timeout);
  // The job's plans (plan_response.h), or with `node` that node's alone (INVALID_ARGUMENT for a
  // node the plan does not span).
  absl::StatusOr<v1::GetPlanResponse> GetPlan(const std::string& job_id,
                                              std::optional<int> node = std::nullopt) const;
  // A part of the Chrome trace of an ended job submitted with `trace` (its nodes' acts merged):
  // from byte `offset`, at most `max_bytes` (> 0), whole characters (TracePartLength), with the
  // document's size. FAILED_PRECONDITION for a job without trace or not ended; RESOURCE_EXHAUSTED
  // naming the node when a node's trace did not fit in a message; INVALID_ARGUMENT for an offset
  // past the end; NOT_FOUND for an unknown id.
  absl::StatusOr<v1::GetTraceResponse> GetTrace(const std::string& job_id, int64_t offset,
                                                int64_t max_bytes) const;

  struct EventBatch {
    // Held events with sequence >= the one asked for, in order (shared with the job's record, so
    // that a batch copies no fetched tensor).
    std::vector<std::shared_ptr<const v1::JobEvent>> events;
    // The job has ended and `events` holds its last event: nothing more will come.
    bool ended = false;
  };
  // The job's events from `from_sequence` on; waits up to `timeout` while there are none and the
  // job has not ended. NOT_FOUND for an unknown (or forgotten) id.
  absl::StatusOr<EventBatch> WaitForEvents(const std::string& job_id, int64_t from_sequence,
                                           absl::Duration timeout) const;

  // What a node reports about the running job (NodeAgent's updates), and a lost node.
  void OnNodeUpdate(int node, const v1::NodeJobUpdate& update);
  void OnNodeLost(int node, const absl::Status& reason);

  // The running (or launching) job's id; empty when idle.
  std::string RunningJobId() const;
  // False once Shutdown has begun.
  bool accepting() const;
  const Options& options() const { return options_; }

 private:
  void WorkerLoop();
  void RunJob(const std::shared_ptr<JobRecord>& record);
  // Node `node`'s part of the job ended with `status`; an error is prefixed with the node's name
  // unless it names the node already (`names_node`, and UNAVAILABLE: a lost node).
  void OnNodeEnded(const std::string& job_id, int node, const absl::Status& status,
                   bool names_node = false);
  // Waits until `done` holds for every node of the launched `record`, a node failed, the job was
  // cancelled, or `wake` (checked with the lock held) holds; returns false when a node failed or
  // the job was cancelled, or at the deadline (which becomes the job's error, naming `phase`).
  bool WaitForNodes(JobRecord* record,
                    const std::function<bool(const JobRecord::NodeProgress&)>& done,
                    absl::Duration deadline, const char* phase,
                    const std::function<bool()>& wake = nullptr);
  // The running phase: waits until every node ended; meanwhile, for a job saving checkpoints
  // every few steps, assembles the newest step whose parts every node with variables has written
  // and removes the older parts. False when the job failed (a checkpoint that could not be saved
  // is the job's error).
  bool RunAndSaveCheckpoints(JobRecord* record, const std::vector<int>& participants);
  // Assembles the checkpoint from the parts of `nodes` under `parts` (job_checkpoint.h) after
  // the job's `step`, writes it to the job's checkpoint path and records it (JobInfo.
  // checkpoint_step, a CheckpointSaved event). The error names the path and the step.
  absl::Status SaveCheckpoint(JobRecord* record, const std::vector<int>& nodes,
                              absl::string_view parts, int64_t step);
  // After a failed connect phase in which nodes reported unreachable peers: waits for every
  // node's report and makes the job's error name the node(s) the others cannot reach.
  void NameUnreachableNodes(JobRecord* record, const std::vector<int>& participants);
  // The error of a plan or trace (`what`) of `job_id` that could not be read from the data
  // directory: NOT_FOUND when the job was forgotten meanwhile, DATA_LOSS otherwise. Takes mutex_.
  absl::Status StoredReadError(const std::string& job_id, absl::string_view what,
                               const absl::Status& status) const;
  // The rest take mutex_ held.
  JobRecord* Find(const std::string& job_id) const;
  v1::JobInfo InfoOf(const JobRecord& record) const;
  // A new event of the record (its job id, sequence and time set). Except for a `fetched` one (the
  // caller sets a fetched tensor), it first makes room under max_events_per_job.
  v1::JobEvent* AppendEvent(JobRecord* record, bool fetched = false);
  // Drops the fetched tensors of the job that holds them (fetches_held_by_), if any.
  void ReleaseFetches();
  void ChangeState(JobRecord* record, v1::JobState state, const absl::Status& error);
  void Finish(JobRecord* record, v1::JobState state, const absl::Status& error);
  // Whether the record's trace is still to be merged and kept (a traced job, every node's trace
  // complete, not kept yet).
  bool TraceToKeep(const JobRecord& record) const;
  // At a run's end, before Finish: merges the nodes' trace events and keeps the document
  // (KeepTrace), outside the lock but for taking the events and keeping the result.
  void KeepTraceOf(JobRecord* record);
  // Under the lock: keeps the merged trace, `packed` in memory without a data directory, else
  // `document` written there.
  void KeepTrace(JobRecord* record, std::shared_ptr<const PackedTrace> packed,
                 std::string document);
  // Without a store: drops the packed traces of the oldest finished jobs while all of them and
  // `newest`'s take more than options.max_kept_trace_bytes (never `newest`'s).
  void DropOldTraces(const JobRecord& newest);
  // A job that ended keeps its events (but the fetched tensors) packed (packed_events.h).
  void PackEventsOf(JobRecord* record);
  void ForgetOldFinishedJobs();
  void Restore();
  // OK while the queue has room for job `name` (options.max_pending_jobs), and, for its plan of
  // `tasks` tasks (0: not compiled yet), while the waiting jobs' plans and it hold at most
  // options.max_plan_tasks; RESOURCE_EXHAUSTED saying which otherwise.
  absl::Status QueueRoomLocked(const std::string& name, int64_t tasks) const;
  // A job that ended (its run over, or cancelled while pending) drops its compilation, keeping
  // its plan compressed for GetPlan when there is no data directory (with one, GetPlan reads it
  // from there). Takes the lock; compresses outside it.
  void ReleaseCompiled(const std::shared_ptr<JobRecord>& record);
  // Queues the admitted job: a record, pending, written to the store. `compile_time` is for the
  // log.
  v1::JobInfo QueueJob(std::unique_ptr<loomctl::CompiledJob> compiled, const SubmitOptions& options,
                       absl::Duration compile_time);
  // Queues a write to the store (there is one) and keeps its ticket in last_write_.
  void Write(std::string what, JobStoreWriter::Write write);
  // Queues the record's write to the store (when there is one); a failure is logged, not fatal.
  // Without `with_step_events` only its state-change events are written (a running job's
  // progress). Fetched tensors are never written.
  void Persist(JobRecord* record, bool with_step_events = true);

  const Options options_;
  Cluster* const cluster_;
  // Makes the store's writes off mutex_ (null without a store); destroyed after every write.
  std::unique_ptr<JobStoreWriter> writer_;

  // Held while a submitted job compiles (Submit), apart from mutex_: one compile at a time.
  std::mutex compile_mutex_;
  mutable std::mutex mutex_;
  // Notified on every event, state change and queue change.
  mutable std::condition_variable changed_;
  std::map<int64_t, std::shared_ptr<JobRecord>> records_;  // by number: submission order
  absl::flat_hash_map<std::string, int64_t> number_of_id_;
  std::deque<int64_t> queue_;     // pending, first to run first
  std::deque<int64_t> finished_;  // in the order they ended
  uint64_t last_write_ = 0;       // the ticket of the last write queued to writer_
  std::shared_ptr<JobRecord> running_;
  std::shared_ptr<StepTracker> tracker_;  // the running job's, while it runs
  // The running job's, while it runs, when it streams its fetches.
  std::shared_ptr<FetchStream> fetch_stream_;
  // The number of the job whose fetched tensors are held (0: none): the last one that streamed
  // them. A job that starts streaming releases them.
  int64_t fetches_held_by_ = 0;
  int64_t last_number_ = 0;
  bool accepting_ = true;
  bool stopping_ = false;  // the worker exits
  std::thread worker_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_MANAGER_H_
