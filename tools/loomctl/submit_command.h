#ifndef LOOM_TOOLS_LOOMCTL_SUBMIT_COMMAND_H_
#define LOOM_TOOLS_LOOMCTL_SUBMIT_COMMAND_H_

// `loomctl submit`: SubmitSubcommand and its flags (SubmitArgumentSpec), which submit a job file
// to the coordinator and, with --watch, follow the job to its end (job_watch.h). The exit codes
// say whether the daemon took the job and, with --watch, how the job ended.

#include "cli/arguments.h"

namespace loom::loomctl {

// `loomctl submit JOB [--watch] [flags]`: reads a job file as `loomctl run` does (text, JSON or
// binary), submits it to the coordinator and prints its id (--output json: its JobInfo). With
// --watch, follows it to its end (WatchJobAndReport).
//
// Exit codes: 0 submitted (with --watch: the job SUCCEEDED); 1 the job FAILED (or, with
// --fetch-dir, a fetched tensor could not be written); 2 usage error or
// an unreadable job file; 3 the job was CANCELLED; 4 the daemon refused the job (its status on
// stderr: INVALID_ARGUMENT naming the op, RESOURCE_EXHAUSTED, ...); 5 no daemon answered or the
// connection broke.
cli::Subcommand SubmitSubcommand();
cli::ArgumentSpec SubmitArgumentSpec();

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_SUBMIT_COMMAND_H_
