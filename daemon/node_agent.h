#ifndef LOOM_DAEMON_NODE_AGENT_H_
#define LOOM_DAEMON_NODE_AGENT_H_

// NodeAgent: the worker half of every loomd (the coordinator has one for its own node). It runs
// this node's part of a job through a NodeJob on the coordinator's commands (launch, connect,
// start, abort, release), one job at a time, and reports what happens. On a worker the
// WorkerSession feeds it commands and sends its updates. Also CheckUpdateFits, an update's check
// against the message limit.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/checkpoint_snapshots.h"
#include "daemon/node_job.h"
#include "kernels/kernel_registry.h"
#include "proto/loom/v1/node_service.pb.h"
#include "runtime/runtime_metrics.h"

namespace loom::daemon {

// What a Reporter checks: OK when an update of `bytes` (as sent) on job `job_id` fits `limit`, the
// largest message from this node to the coordinator; RESOURCE_EXHAUSTED saying so otherwise.
absl::Status CheckUpdateFits(const std::string& job_id, size_t bytes, int64_t limit);

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

  // `kernels` must outlive the agent; `report` is called from the agent's threads.
  // `metrics` (may be null) receives the runtime's live metrics of every job; it must outlive
  // the agent. A traced job's events that `report` refuses as too large are not sent (the update
  // says so instead).
  NodeAgent(const KernelRegistry* kernels, Reporter report, RuntimeMetrics* metrics = nullptr);
  // Aborts and releases the job, joins the threads.
  ~NodeAgent();

  void Handle(const v1::NodeCommand& command);
  // The coordinator is gone: abort the job (if any) and release it; nothing more is reported about
  // it (a restarted coordinator may already run another job of the same id).
  void AbortAll(const std::string& reason);
  // Whether a job is launched and not yet released.
  bool busy() const;

 private:
  void Loop();
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
  // The current job records its acts and sends them before its end (agent thread only).
  bool record_events_ = false;
  // The current job's checkpoint path (its part is written there when it succeeds); empty: none.
  std::string checkpoint_path_;
  // The current job's periodic checkpoint parts (agent thread only; null: none).
  std::shared_ptr<CheckpointSnapshots> snapshots_;
  RuntimeMetrics* const metrics_;
  const Reporter report_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<v1::NodeCommand> commands_;  // guarded by mutex_
  bool stopping_ = false;                 // guarded by mutex_
  std::string job_id_;                    // guarded by mutex_: the launched job
  std::shared_ptr<NodeJob> job_;          // guarded by mutex_
  bool ended_reported_ = false;           // guarded by mutex_
  std::thread waiter_;                    // agent thread only
  // Held while reporting (a leaf: report_ takes no lock of this agent's).
  std::mutex report_mutex_;
  bool orphaned_ = false;  // guarded by report_mutex_: the job's coordinator is gone
  std::thread thread_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_NODE_AGENT_H_
