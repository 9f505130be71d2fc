#ifndef LOOM_DAEMON_JOB_RUN_H_
#define LOOM_DAEMON_JOB_RUN_H_

// The parts of one job's run on its nodes that need none of the JobManager's state: the nodes a
// compiled job runs on, how long its nodes may take to join their communicators, the check of a
// piece a node forwards, the MoE fetches counted into the metrics, and the error of a job the
// daemon's shutdown cancelled before it started. JobManager (job_manager_run.cc) runs the job with
// them.

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "compiler/compiler.h"
#include "daemon/job_record.h"
#include "daemon/metrics.h"
#include "daemon/step_tracker.h"
#include "proto/loom/v1/node_service.pb.h"
#include "proto/plan.pb.h"

namespace loom::daemon {

// How long a node may take to join its communicators that span nodes: what the launch timeout
// leaves after the probes, less a margin for the node's report to arrive, so that the join's
// error (naming the communicator) ends a launch before the coordinator's "connecting" timeout.
// `launch_timeout` and `probe_timeout`: JobManager::Options'.
absl::Duration JoinTimeout(absl::Duration launch_timeout, absl::Duration probe_timeout);

// The nodes whose plans have tasks.
std::vector<int> NodesOf(const compiler::CompileResult& result);

// Whether a forwarded piece's bytes are as many as its data type and shape say (a node's update
// is not trusted to be well formed).
bool PieceSizeMatches(const v1::SinkPieceUpdate& piece);

// The MoE fetches of the plan (kMoeDroppedFetch, kMoeTokensPerExpertFetch), counted into the
// metrics per micro-batch.
void CountMoeFetches(const plan::Plan& plan, StepTracker* tracker, DaemonMetrics* metrics);

// The error of a job that the daemon's shutdown cancelled before it started.
absl::Status CancelledAtShutdown(const JobRecord& record);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_RUN_H_
