#ifndef LOOM_TOOLS_LOOMCTL_JOB_AND_NODE_COMMANDS_H_
#define LOOM_TOOLS_LOOMCTL_JOB_AND_NODE_COMMANDS_H_

// The loomctl commands that ask a running cluster's coordinator about its jobs and nodes:
// status, jobs, cancel, watch, nodes, plan and trace, with their flags and exit codes.

#include "cli/arguments.h"

namespace loom::loomctl {

// The commands that ask the coordinator about jobs and nodes. Each takes --coordinator, --output
// text|json and --timeout (AddClusterFlags). Text is for people (tables); JSON is the API's
// response message in the proto3 JSON mapping, one object per line, for scripts.
//
// Exit codes: 0 done; 2 usage error; 4 the daemon refused the request (its status on stderr:
// NOT_FOUND for an unknown job, FAILED_PRECONDITION for cancelling a finished job, ...); 5 no
// daemon answered or the connection broke. `watch` also returns 1 (the job failed) and 3 (it was
// cancelled), as `submit --watch` does.

// `loomctl status JOB_ID`: the job's state, progress, devices, times and error (GetJob).
cli::Subcommand StatusSubcommand();
// `loomctl jobs [--state S[,S...]]`: every job the daemon remembers, oldest first (ListJobs).
cli::Subcommand JobsSubcommand();
// `loomctl cancel JOB_ID [--reason TEXT]`: cancels the job; returns once it ended (CancelJob).
cli::Subcommand CancelSubcommand();
// `loomctl watch JOB_ID`: follows a submitted job to its end, as `submit --watch` does.
cli::Subcommand WatchSubcommand();
// `loomctl nodes`: the cluster's nodes (ListNodes).
cli::Subcommand NodesSubcommand();
// `loomctl plan JOB_ID [--node N]`: the compiled plan in protobuf text format (--output json:
// JSON), the whole plan or node N's part (GetPlan).
cli::Subcommand PlanSubcommand();
// `loomctl trace JOB_ID FILE`: the Chrome trace of an ended job submitted with trace (GetTrace).
cli::Subcommand TraceSubcommand();

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_JOB_AND_NODE_COMMANDS_H_
