#ifndef LOOM_TOOLS_LOOMCTL_JOB_SUMMARY_H_
#define LOOM_TOOLS_LOOMCTL_JOB_SUMMARY_H_

// What loomctl's commands share for their output: the formats (OutputFormat, JsonLayout), the
// summary of a job run in this process as text (actor table and footer) or JSON, for `run-plan`
// and `run`, and small helpers (task kind names, milliseconds, file-safe names, text tables, log
// verbosity).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/plan.pb.h"
#include "runtime/job_runtime.h"

namespace loom::loomctl {

// What a finished job did, as text or JSON, and the small helpers the commands that run jobs
// (`loomctl run-plan`, `loomctl run`) share.

enum class OutputFormat { kText, kJson };

enum class JsonLayout {
  // One element per line (run-plan's summary).
  kMultiLine,
  // The whole object on one line (one JSON object per line, as `loomctl run` prints).
  kOneLine,
};

// "compute", "source", "collective", ...
std::string TaskKindName(plan::TaskKind kind);

// Nanoseconds as milliseconds with three decimals: "1.250".
std::string FormatMilliseconds(int64_t nanoseconds);

// A file name part: letters, digits, '.', '-' and '_' are kept, anything else becomes '_'.
std::string FileNamePart(const std::string& name);

// A text table: the first `text_columns` columns are left-aligned, the others right-aligned; two
// spaces between columns, no trailing spaces.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows, size_t text_columns);

// INFO logs (and VLOG(1)) with `verbose`, warnings and errors only without.
void SetLogVerbosity(bool verbose);

// The per-actor table: actor, kind, stream, acts, busy, blocked on input, blocked on output,
// waiting for the thread (milliseconds). Call after the job ran.
std::string FormatActorTable(const JobRuntime& job);

// The footer: "job 'NAME': A actors on T stream threads, N acts", the makespan and every
// device's peak memory (with its budget).
std::string FormatSummaryFooter(const JobRuntime& job);

// The actor table, a blank line, then the footer.
std::string FormatSummaryText(const JobRuntime& job);

// The same as one JSON object: job_name, status ("ok" or "failed", with "error" holding the
// message when it failed), makespan_ms, acts, actors, devices (peak and budget bytes), trace
// (`trace_path`, or null) and fetched_files. Ends with a newline.
std::string FormatSummaryJson(const JobRuntime& job, const absl::Status& status,
                              const std::string& trace_path,
                              const std::vector<std::string>& fetched_files,
                              JsonLayout layout = JsonLayout::kMultiLine);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_JOB_SUMMARY_H_
