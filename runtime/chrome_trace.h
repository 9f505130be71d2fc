#ifndef LOOM_RUNTIME_CHROME_TRACE_H_
#define LOOM_RUNTIME_CHROME_TRACE_H_

// Chrome traces of what a job did, drawn from JobRuntime::events(): one node's whole trace
// (ChromeTraceJson, WriteChromeTrace), one node's events alone (ChromeTraceEvents, with
// TraceOffsets for jobs that continue others), and a document from several nodes' events
// (ChromeTraceDocument, WriteChromeTraceFile). Used by `loomctl` and by loomd's node agent and job
// history.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom {

class JobRuntime;

// Writes what a finished job did (JobRuntime::events()) as a Chrome trace: a JSON object whose
// "traceEvents" hold one complete event ("ph": "X") per act, with "ts" and "dur" in microseconds,
// "pid" the device, "tid" the stream thread, "name" the task and "args" {"piece", "step" (from 1:
// the piece's step, Task.pieces_per_step), "kind"}; plus
// metadata events ("ph": "M") naming every device and stream, so that the file reads well in
// Perfetto (ui.perfetto.dev) and chrome://tracing. Call after JobRuntime::Wait. A failed job
// writes the acts it made. A record that reached JobOptions::max_recorded_events
// (JobRuntime::events_truncated) ends with a global instant event ("ph": "i", "cat":
// "trace_truncated") saying so. Errors name `path`.
absl::Status WriteChromeTrace(const JobRuntime& job, const std::string& path);

// The trace as a string (what WriteChromeTrace writes).
std::string ChromeTraceJson(const JobRuntime& job);

// The trace's events alone, comma-separated (metadata first, then one event per act): one node's
// part of a multi-node job's trace. Device pids start at node * kTracePidsPerNode + 1, so that the
// parts of a job's nodes never share a process.
inline constexpr int kTracePidsPerNode = 1000;
// What the events of a job that continues others add to their times and steps, so that the traces
// of jobs run one after another share one time axis and one count of steps.
struct TraceOffsets {
  // Added to the acts' times, which count from the job's start.
  int64_t nanoseconds = 0;
  // Added to the acts' steps, which count from the job's first (as 1).
  int64_t steps = 0;
};
std::string ChromeTraceEvents(const JobRuntime& job, const TraceOffsets& offsets = {});

// A whole trace from event lists (ChromeTraceEvents of each node; empty lists are skipped).
std::string ChromeTraceDocument(absl::string_view job_name,
                                const std::vector<std::string>& event_lists);

// Writes a trace document (ChromeTraceDocument's) to `path`. Errors name `path`.
absl::Status WriteChromeTraceFile(absl::string_view json, const std::string& path);

}  // namespace loom

#endif  // LOOM_RUNTIME_CHROME_TRACE_H_
