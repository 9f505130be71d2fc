#ifndef LOOM_DAEMON_JOB_MANAGER_H_
#define LOOM_DAEMON_JOB_MANAGER_H_

// The coordinator's job lifecycle: JobManager admits and queues submitted jobs (SubmitOptions: the
// request's fields besides the job), runs one at a time on the nodes it needs through the Cluster,
// takes the nodes' updates, and records every job's events, plan and trace for the JobService
// calls (JobServiceImpl). Its definitions are spread over job_manager.cc, job_manager_run.cc,
// job_manager_history.cc and job_manager_persistence.cc.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/file_roots.h"
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
  // With checkpoint_path: the job may replace a file it did not write there.
  bool overwrite_checkpoint = false;
  // Its fetched tensors go to its watchers (SubmitJobRequest.stream_fetches, FetchStream).
  bool stream_fetches = false;
  // Who submitted it (JobInfo.owner): the identity of the caller's certificate; empty over
  // plaintext.
  std::string owner;
};

// The job lifecycle on the coordinator (DESIGN.md §1): admits and compiles submitted jobs for the
// cluster's devices, queues them first in, first out, and runs one at a time (a worker thread of
// its own) on the nodes it needs: launch (each node builds its actors and opens its network),
// connect (every node gets every node's address; a barrier), start, wait for every node's end,
// release. A failure on any node, a lost node or a cancellation aborts the job on every node.
// Records every job's events (state changes; step events from the loss's sinks, which their
// nodes forward) for watchers.
//
// Its definitions are split by what they do: the queue and the public calls on it
// (job_manager.cc), one job's run on its nodes (job_manager_run.cc), the jobs' history and traces
// (job_manager_history.cc), the data directory's writes and restore (job_manager_persistence.cc).
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
    // Where checkpoints may be written (loomd --checkpoint-root); not owned, must outlive the
    // manager. Null: checkpoint_path is refused.
    const FileRoots* checkpoint_roots = nullptr;
  };

  // `cluster` must outlive the manager.
  JobManager(Options options, Cluster* cluster);
  // Shutdown(zero grace) when it was not called.
  ~JobManager();

  // Restores the jobs of the store (those that had not ended fail: the coordinator restarted
  // under them), then starts the worker thread.
  void Start() ABSL_LOCKS_EXCLUDED(mutex_);
  // Stops taking jobs (Submit: UNAVAILABLE), cancels the pending ones, lets the running one go on
  // for `grace`, then cancels it, and joins the worker. Returns when no job runs.
  void Shutdown(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mutex_);

  // Admits (AdmitJob's errors; CheckCheckpointPath's for a checkpoint path), then queues the job.
  // UNAVAILABLE while shutting down.
  absl::StatusOr<v1::JobInfo> Submit(job::Job job, const SubmitOptions& options = {})
      ABSL_LOCKS_EXCLUDED(mutex_, compile_mutex_);
  // NOT_FOUND for an unknown (or forgotten) id.
  absl::StatusOr<v1::JobInfo> Get(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Jobs in `states` (empty: every job), oldest first, from the first one submitted after the job
  // numbered `after` (0: from the oldest), at most `limit` of them (0: every one). `more` (when
  // not null) says whether jobs in `states` follow the last one returned. With `owner`, only the
  // jobs it submitted (JobInfo.owner) count.
  std::vector<v1::JobInfo> List(const std::vector<v1::JobState>& states, int64_t after = 0,
                                int limit = 0, bool* more = nullptr,
                                const std::optional<std::string>& owner = std::nullopt) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The bytes kept for the finished jobs remembered (--max-finished-jobs), by what they hold:
  // their plans, events and traces (compressed), and the fetched tensors of a job that streamed
  // them, until released. What a metric shows operators of the coordinator's job history.
  struct HistoryBytes {
    int64_t plans = 0;
    int64_t events = 0;
    int64_t traces = 0;
    int64_t fetched = 0;
  };
  HistoryBytes FinishedJobsBytes() const ABSL_LOCKS_EXCLUDED(mutex_);
  // A pending job ends CANCELLED at once; a running one is aborted, and the call waits up to
  // `timeout` for it to end. Cancelling a cancelled job returns it; a succeeded or failed one is
  // FAILED_PRECONDITION; an unknown id NOT_FOUND.
  absl::StatusOr<v1::JobInfo> Cancel(const std::string& job_id, const std::string& reason,
                                     absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mutex_);
  // The job's plans (plan_response.h), or with `node` that node's alone (INVALID_ARGUMENT for a
  // node the plan does not span).
  absl::StatusOr<v1::GetPlanResponse> GetPlan(const std::string& job_id,
                                              std::optional<int> node = std::nullopt) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // A part of the Chrome trace of an ended job submitted with `trace` (its nodes' acts merged):
  // from byte `offset`, at most `max_bytes` (> 0), whole characters (TracePartLength), with the
  // document's size. FAILED_PRECONDITION for a job without trace or not ended; RESOURCE_EXHAUSTED
  // naming the node when a node's trace did not fit in a message; INVALID_ARGUMENT for an offset
  // past the end; NOT_FOUND for an unknown id.
  absl::StatusOr<v1::GetTraceResponse> GetTrace(const std::string& job_id, int64_t offset,
                                                int64_t max_bytes) const
      ABSL_LOCKS_EXCLUDED(mutex_);

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
                                           absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  // What a node reports about the running job (NodeAgent's updates), and a lost node.
  void OnNodeUpdate(int node, const v1::NodeJobUpdate& update) ABSL_LOCKS_EXCLUDED(mutex_);
  void OnNodeLost(int node, const absl::Status& reason) ABSL_LOCKS_EXCLUDED(mutex_);

  // The running (or launching) job's id; empty when idle.
  std::string RunningJobId() const ABSL_LOCKS_EXCLUDED(mutex_);
  // False once Shutdown has begun.
  bool accepting() const ABSL_LOCKS_EXCLUDED(mutex_);
  const Options& options() const { return options_; }

 private:
  // The queue (job_manager.cc).
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mutex_);
  // OK while the queue has room for job `name` (options.max_pending_jobs), and, for its plan of
  // `tasks` tasks (0: not compiled yet), while the waiting jobs' plans and it hold at most
  // options.max_plan_tasks; RESOURCE_EXHAUSTED saying which otherwise.
  absl::Status QueueRoomLocked(const std::string& name, int64_t tasks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Queues the admitted job: a record, pending, written to the store. `compile_time` is for the
  // log. Takes mutex_ held.
  v1::JobInfo QueueJob(std::unique_ptr<compiler::CompiledJob> compiled,
                       const SubmitOptions& options, absl::Duration compile_time)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // These two take mutex_ held.
  JobRecord* Find(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  v1::JobInfo InfoOf(const JobRecord& record) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // One job's run on its nodes (job_manager_run.cc).
  void RunJob(const std::shared_ptr<JobRecord>& record) ABSL_LOCKS_EXCLUDED(mutex_);
  // Node `node`'s part of the job ended with `status`; an error is prefixed with the node's name
  // unless it names the node already (`names_node`, and UNAVAILABLE: a lost node).
  void OnNodeEnded(const std::string& job_id, int node, const absl::Status& status,
                   bool names_node = false) ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits until `done` holds for every node of the launched `record`, a node failed, the job was
  // cancelled, or `wake` (checked with the lock held) holds; returns false when a node failed or
  // the job was cancelled, or at the deadline (which becomes the job's error, naming `phase`).
  bool WaitForNodes(JobRecord* record,
                    const std::function<bool(const JobRecord::NodeProgress&)>& done,
                    absl::Duration deadline, const char* phase,
                    const std::function<bool()>& wake = nullptr) ABSL_LOCKS_EXCLUDED(mutex_);
  // The running phase: waits until every node ended; meanwhile, for a job saving checkpoints
  // every few steps, assembles the newest step whose parts every node with variables has written
  // and removes the older parts. False when the job failed (a checkpoint that could not be saved
  // is the job's error).
  bool RunAndSaveCheckpoints(JobRecord* record, const std::vector<int>& participants)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Assembles the checkpoint from the parts of `nodes` under `parts` (job_checkpoint.h) after
  // the job's `step`, writes it to the job's checkpoint path and records it (JobInfo.
  // checkpoint_step, a CheckpointSaved event). The error names the path and the step.
  absl::Status SaveCheckpoint(JobRecord* record, const std::vector<int>& nodes,
                              absl::string_view parts, int64_t step) ABSL_LOCKS_EXCLUDED(mutex_);
  // After a failed connect phase in which nodes reported unreachable peers: waits for every
  // node's report and makes the job's error name the node(s) the others cannot reach.
  void NameUnreachableNodes(JobRecord* record, const std::vector<int>& participants)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // The jobs' history: their events, ends, traces and compiled plans kept
  // (job_manager_history.cc).
  //
  // The error of a plan or trace (`what`) of `job_id` that could not be read from the data
  // directory: NOT_FOUND when the job was forgotten meanwhile, DATA_LOSS otherwise. Takes mutex_.
  absl::Status StoredReadError(const std::string& job_id, absl::string_view what,
                               const absl::Status& status) const ABSL_LOCKS_EXCLUDED(mutex_);
  // A new event of the record (its job id, sequence and time set). Except for a `fetched` one (the
  // caller sets a fetched tensor), it first makes room under max_events_per_job. Takes mutex_
  // held.
  v1::JobEvent* AppendEvent(JobRecord* record, bool fetched = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Drops the fetched tensors of the job that holds them (fetches_held_by_), if any. Takes mutex_
  // held.
  void ReleaseFetches() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes mutex_ held.
  void ChangeState(JobRecord* record, v1::JobState state, const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes mutex_ held.
  void Finish(JobRecord* record, v1::JobState state, const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // At a run's end, before Finish: merges the nodes' trace events and keeps the document
  // (KeepTrace), outside the lock but for taking the events and keeping the result.
  void KeepTraceOf(JobRecord* record) ABSL_LOCKS_EXCLUDED(mutex_);
  // Under the lock: keeps the merged trace, `packed` in memory without a data directory, else
  // `document` written there.
  void KeepTrace(JobRecord* record, std::shared_ptr<const PackedTrace> packed, std::string document)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes mutex_ held.
  void ForgetOldFinishedJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A job that ended (its run over, or cancelled while pending) drops its compilation, keeping
  // its plan compressed for GetPlan when there is no data directory (with one, GetPlan reads it
  // from there). Takes the lock; compresses outside it.
  void ReleaseCompiled(const std::shared_ptr<JobRecord>& record) ABSL_LOCKS_EXCLUDED(mutex_);

  // The data directory's writes and restore (job_manager_persistence.cc); each takes mutex_ held.
  //
  // Restores the store's jobs into the records (those that had not ended fail).
  void Restore() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Queues a write to the store (there is one) and keeps its ticket in last_write_.
  void Write(std::string what, JobStoreWriter::Write write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Queues the record's write to the store (when there is one); a failure is logged, not fatal.
  // Without `with_step_events` only its state-change events are written (a running job's
  // progress). Fetched tensors are never written.
  void Persist(JobRecord* record, bool with_step_events = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const Options options_;
  Cluster* const cluster_;
  // Makes the store's writes off mutex_ (null without a store); destroyed after every write.
  std::unique_ptr<JobStoreWriter> writer_;

  // Held while a submitted job compiles (Submit), apart from mutex_: one compile at a time.
  absl::Mutex compile_mutex_;
  mutable absl::Mutex mutex_;
  // Notified on every event, state change and queue change.
  mutable absl::CondVar changed_;
  // By number: submission order.
  std::map<int64_t, std::shared_ptr<JobRecord>> records_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, int64_t> number_of_id_ ABSL_GUARDED_BY(mutex_);
  std::deque<int64_t> queue_ ABSL_GUARDED_BY(mutex_);     // pending, first to run first
  std::deque<int64_t> finished_ ABSL_GUARDED_BY(mutex_);  // in the order they ended
  // The ticket of the last write queued to writer_.
  uint64_t last_write_ ABSL_GUARDED_BY(mutex_) = 0;
  std::shared_ptr<JobRecord> running_ ABSL_GUARDED_BY(mutex_);
  // The running job's, while it runs.
  std::shared_ptr<StepTracker> tracker_ ABSL_GUARDED_BY(mutex_);
  // The running job's, while it runs, when it streams its fetches.
  std::shared_ptr<FetchStream> fetch_stream_ ABSL_GUARDED_BY(mutex_);
  // The number of the job whose fetched tensors are held (0: none): the last one that streamed
  // them. A job that starts streaming releases them.
  int64_t fetches_held_by_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t last_number_ ABSL_GUARDED_BY(mutex_) = 0;
  bool accepting_ ABSL_GUARDED_BY(mutex_) = true;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;  // the worker exits
  std::thread worker_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_MANAGER_H_
