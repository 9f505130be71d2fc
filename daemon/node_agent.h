#ifndef LOOM_DAEMON_NODE_AGENT_H_
#define LOOM_DAEMON_NODE_AGENT_H_

// NodeAgent: the worker half of every loomd (the coordinator has one for its own node). It runs
// this node's part of a job through a NodeJob on the coordinator's commands (launch, connect,
// start, abort, release), one job at a time, and reports what happens. On a worker the
// WorkerSession feeds it commands and sends its updates; its health (a part that does not end
// after its release) goes to the daemon's health and the node's heartbeats. Also
// NodeAgentOptions and CheckUpdateFits, an update's check against the message limit.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/file_roots.h"
#include "daemon/checkpoint_snapshots.h"
#include "daemon/node_job.h"
#include "kernels/kernel_registry.h"
#include "proto/loom/v1/node_service.pb.h"
#include "runtime/runtime_metrics.h"

namespace loom::daemon {

// What a Reporter checks: OK when an update of `bytes` (as sent) on job `job_id` fits `limit`, the
// largest message from this node to the coordinator; RESOURCE_EXHAUSTED saying so otherwise.
absl::Status CheckUpdateFits(const std::string& job_id, size_t bytes, int64_t limit);

// How a NodeAgent runs (everything but its kernels and reporter).
struct NodeAgentOptions {
  // Receives the runtime's live metrics of every job (null: none); must outlive the agent.
  RuntimeMetrics* metrics = nullptr;
  // What the jobs' kernels may open (data and initial states: --data-root and --checkpoint-root),
  // and where their checkpoint parts are written (--checkpoint-root); must outlive the agent.
  // Null: no file may be opened, no checkpoint written.
  const FileRoots* files = nullptr;
  const FileRoots* checkpoint_roots = nullptr;
  // How long a job's part may take to end once the agent was told to abort or release it; past
  // that the agent is unhealthy (NodeAgent::health) until the part ends (--release-timeout).
  absl::Duration release_timeout = absl::Seconds(30);
  // The most acts a traced job records on this node (--max-trace-events-per-job).
  int64_t max_trace_events_per_job = 2'000'000;
  // Called whenever health() changes, with its new value, from a thread of the agent's (never
  // under a lock of the agent's); may be null. It must stay callable until Stop returned.
  std::function<void(const absl::Status& health)> health_changed;
};

// The worker half of every loomd (the coordinator has one for its own node): runs this node's part
// of jobs on the coordinator's commands (launch, connect, start, abort, release) and reports what
// happens (launched with its UCX address, connected, forwarded sink pieces, ended). One job at a
// time. Commands are queued and run in order on the agent's own thread, so a slow launch never
// blocks the session that delivers them; a job's end is reported by a waiter thread.
//
// Thread-safe: Handle and AbortAll may be called from any thread.
class NodeAgent {
 public:
  // Sends an update to the coordinator: OK once queued; RESOURCE_EXHAUSTED when it is over the
  // largest message to the coordinator (nothing sent), another error when it cannot be sent.
  using Reporter = std::function<absl::Status(const v1::NodeJobUpdate& update)>;

  // `kernels` must outlive the agent; `report` is called from the agent's threads. A traced job's
  // events that `report` refuses as too large are not sent (the update says so instead).
  NodeAgent(const KernelRegistry* kernels, Reporter report, NodeAgentOptions options = {});
  // Stop(infinite): aborts and releases the job, joins the threads. Must not be called after a
  // Stop that returned false unless a later Stop returned true (the threads still use the agent).
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  void Handle(const v1::NodeCommand& command);
  // The coordinator is gone: abort the job (if any) and release it; nothing more is reported about
  // it (a restarted coordinator may already run another job of the same id).
  void AbortAll(const std::string& reason);
  // Aborts and releases the job, takes no more commands, and waits at most `bound` for the agent's
  // threads to end. False when they did not (a job's part that does not end: a kernel or a file
  // read that never returns): they are left running, and the agent must not be destroyed until a
  // later Stop returns true (a daemon that exits leaks it). Idempotent.
  bool Stop(absl::Duration bound);
  // Whether a job is launched and not yet released.
  bool busy() const;
  // OK while healthy; UNAVAILABLE naming the job while its part has not ended release_timeout
  // after the agent was told to abort or release it (this node then takes no new job: its
  // commands wait behind that release). OK again once the part ended.
  absl::Status health() const;

 private:
  void Loop();
  // Watches the release deadline and calls options_.health_changed on every change of health().
  void MonitorHealth();
  absl::Status HealthLocked(absl::Time now) const;
  // The job's part is told to end (abort or release) now, unless it was told already.
  void MarkStopRequestedLocked();
  void Run(const v1::NodeCommand& command);
  void Launch(const std::string& job_id, const v1::LaunchNodeJob& launch);
  void Release();
  void ReportEnded(const std::string& job_id, const absl::Status& status);
  // The ended job's recorded acts, in parts that fit in a message to the coordinator (halved until
  // they do), or why they could not be sent.
  void ReportTrace(const std::string& job_id, NodeJob& job);
  // Every update goes through here: dropped (OK) once AbortAll orphaned the job; otherwise the
  // reporter's answer.
  absl::Status Report(const v1::NodeJobUpdate& update);

  const KernelRegistry* const kernels_;
  const NodeAgentOptions options_;
  // The current job records its acts and sends them before its end (agent thread only).
  bool record_events_ = false;
  // The current job's checkpoint path (its part is written there when it succeeds); empty: none.
  std::string checkpoint_path_;
  // The current job's periodic checkpoint parts (agent thread only; null: none).
  std::shared_ptr<CheckpointSnapshots> snapshots_;
  const Reporter report_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<v1::NodeCommand> commands_;  // guarded by mutex_
  bool stopping_ = false;                 // guarded by mutex_
  std::string job_id_;                    // guarded by mutex_: the launched job
  std::shared_ptr<NodeJob> job_;          // guarded by mutex_
  bool ended_reported_ = false;           // guarded by mutex_
  // When the launched job's part was first told to end (abort, release); unset while it runs or
  // once it ended (guarded by mutex_).
  std::optional<absl::Time> stop_requested_at_;
  bool loop_ended_ = false;        // guarded by mutex_: Loop returned
  bool monitor_stopping_ = false;  // guarded by mutex_
  std::thread waiter_;             // agent thread only
  // Held while reporting (a leaf: report_ takes no lock of this agent's).
  std::mutex report_mutex_;
  bool orphaned_ = false;  // guarded by report_mutex_: the job's coordinator is gone
  std::thread thread_;
  std::thread monitor_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_NODE_AGENT_H_
