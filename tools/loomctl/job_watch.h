#ifndef LOOM_TOOLS_LOOMCTL_JOB_WATCH_H_
#define LOOM_TOOLS_LOOMCTL_JOB_WATCH_H_

// Following a job on a daemon, for `loomctl submit --watch` and `loomctl watch`: JobEventPrinter
// prints its events as text lines with a progress bar or as JSON lines, and WatchJobAndReport
// follows the job to its end, writes the fetched tensors it streams and returns the exit code of
// how it ended.

#include <optional>
#include <ostream>
#include <string>

#include "client/cluster_client.h"
#include "proto/loom/v1/job_service.pb.h"
#include "tools/loomctl/job_summary.h"
#include "tools/loomctl/step_reporter.h"

namespace loom::loomctl {

// Prints a job's events as `loomctl submit --watch` and `loomctl watch` show them. Text: a line
// per state change ("job-3: RUNNING") and a line per step (FormatStepLineText, with `val_loss` in
// the steps whose event has a validation_loss), with a progress bar (step, loss, tokens/s, ETA) on
// `progress` when it is not null; JSON: every JobEvent as one JSON object per line
// (MessageToJsonLine: a step's "validation_loss" only when set).
class JobEventPrinter {
 public:
  JobEventPrinter(OutputFormat output, std::ostream* out, std::ostream* progress);

  // A fetched tensor's event is printed in JSON only, without its data.
  void OnEvent(const v1::JobEvent& event);
  // Clears the progress bar.
  void Finish();

  // The state of the last state change seen (UNSPECIFIED before any), and its error.
  v1::JobState last_state() const { return last_state_; }
  const v1::JobError& last_error() const { return last_error_; }
  // The last step event seen.
  const std::optional<v1::StepEvent>& last_step() const { return last_step_; }

 private:
  const OutputFormat output_;
  std::ostream* out_;
  StepLinePrinter printer_;
  v1::JobState last_state_ = v1::JOB_STATE_UNSPECIFIED;
  v1::JobError last_error_;
  std::optional<v1::StepEvent> last_step_;
};

// Follows the job with WatchJob until it ends, printing its events (JobEventPrinter; the progress
// bar goes to stderr when it is a terminal and `error` is std::cerr), then, when it did not
// succeed, its error on `error`. With a `fetch_directory` (which must exist), the job's fetched
// tensors (JobEvent.fetched, a job submitted with stream_fetches) are written there as .npy
// files, named as 'loomctl run --fetch-dir' names them, and their count printed on `error` at
// the end. Returns the exit code: kExitSuccess when the job SUCCEEDED (and, with a
// fetch_directory, every file was written, and there was something to write), kExitFailure when
// it FAILED or a file was not written, kExitJobCancelled when it was CANCELLED, else that of the
// failed call (ExitCodeOfRpcError).
int WatchJobAndReport(const char* command, ClusterClient& client, const std::string& job_id,
                      OutputFormat output, std::ostream& out, std::ostream& error,
                      const std::string& fetch_directory = "");

// "INTERNAL: op 'x' failed ..." for a job's error.
std::string FormatJobError(const v1::JobError& error);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_JOB_WATCH_H_
