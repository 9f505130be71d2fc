#include "tools/loomctl/job_watch.h"

#include <unistd.h>

#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/arguments.h"
#include "rpc/grpc_status.h"
#include "tools/loomctl/cluster_connection.h"
#include "tools/loomctl/fetch_directory.h"
#include "tools/loomctl/interrupt_signals.h"

namespace loom::loomctl {

std::string FormatJobError(const v1::JobError& error) {
  return absl::StrCat(absl::StatusCodeToString(FromJobError(error).code()), ": ", error.message());
}

JobEventPrinter::JobEventPrinter(OutputFormat output, std::ostream* out, std::ostream* progress)
    : output_(output),
      out_(out),
      printer_({output == OutputFormat::kJson, out,
                output == OutputFormat::kJson ? nullptr : progress}) {}

void JobEventPrinter::OnEvent(const v1::JobEvent& event) {
  if (event.has_state_change()) {
    last_state_ = event.state_change().state();
    last_error_ = event.state_change().error();
  }
  if (event.has_step()) last_step_ = event.step();
  if (output_ == OutputFormat::kJson) {
    if (event.has_fetched()) {
      v1::JobEvent described = event;
      described.mutable_fetched()->clear_data();
      *out_ << MessageToJsonLine(described);
    } else {
      *out_ << MessageToJsonLine(event);
    }
    out_->flush();
    return;
  }
  if (event.has_step()) {
    const v1::StepEvent& step = event.step();
    StepLine line;
    line.step = step.step();
    line.last_step = step.num_steps();
    line.loss = step.loss();
    for (const v1::StepScalar& scalar : step.scalars()) {
      line.scalars.push_back({scalar.tensor(), scalar.value()});
    }
    if (step.has_validation_loss()) line.validation_loss = step.validation_loss();
    line.step_time_ms = step.step_time_seconds() * 1000.0;
    if (step.has_tokens_per_second()) line.tokens_per_second = step.tokens_per_second();
    printer_.Print(line);
  } else if (event.has_checkpoint()) {
    printer_.PrintOther(absl::StrCat(event.job_id(), ": checkpoint after step ",
                                     event.checkpoint().step(), " saved to ",
                                     event.checkpoint().path()));
  } else if (event.has_state_change()) {
    std::string text = absl::StrCat(event.job_id(), ": ", JobStateName(last_state_));
    if (last_state_ == v1::JOB_STATE_SUCCEEDED && last_step_.has_value()) {
      absl::StrAppendFormat(&text, " (%d steps, last loss %.5f)", last_step_->step(),
                            last_step_->loss());
    }
    printer_.PrintOther(text);
  }
}

void JobEventPrinter::Finish() { printer_.ClearProgress(); }

namespace {

// WatchJob, ended early by SIGINT or SIGTERM (CANCELLED, the signal in `interruption`).
absl::Status WatchUntilInterrupted(ClusterClient& client, const std::string& job_id,
                                   const std::function<void(const v1::JobEvent&)>& on_event,
                                   int* interruption) {
  WatchCancellation cancellation;
  WatchOptions options;
  // Without the handler (another waiter has it, or no pipe), a signal ends loomctl as usual.
  absl::StatusOr<std::unique_ptr<InterruptSignals>> signals =
      InterruptSignals::Install([&cancellation] { cancellation.Cancel(); });
  if (signals.ok()) options.cancellation = &cancellation;
  absl::Status watched = client.WatchJob(job_id, on_event, options);
  if (signals.ok()) *interruption = (*signals)->received();
  return watched;
}

// Ctrl-C stops the following, not the job: says so, and how to go on.
void ReportInterruptedWatch(const char* command, const std::string& job_id,
                            const JobEventPrinter& printer, int interruption, std::ostream& error) {
  error << command << ": stopped following job " << job_id << " (" << SignalName(interruption)
        << ")";
  if (IsTerminal(printer.last_state())) {
    error << "; it had ended " << JobStateName(printer.last_state()) << "\n";
    return;
  }
  error << "; the job goes on";
  if (printer.last_state() != v1::JOB_STATE_UNSPECIFIED) {
    error << " (" << JobStateName(printer.last_state());
    if (printer.last_step().has_value()) {
      error << ", step " << printer.last_step()->step() << " of "
            << printer.last_step()->num_steps();
    }
    error << ")";
  }
  error << ". 'loomctl watch " << job_id << "' follows it again, 'loomctl cancel " << job_id
        << "' cancels it\n";
}

}  // namespace

int WatchJobAndReport(const char* command, ClusterClient& client, const std::string& job_id,
                      OutputFormat output, std::ostream& out, std::ostream& error,
                      const std::string& fetch_directory) {
  // The bar is for a person watching a terminal: never into a captured stream.
  std::ostream* progress = (&error == &std::cerr && isatty(STDERR_FILENO)) ? &error : nullptr;
  JobEventPrinter printer(output, &out, progress);
  int64_t files = 0;
  absl::Status write_error;  // the first file not written; the others are not tried
  int interruption = 0;
  absl::Status watched = WatchUntilInterrupted(
      client, job_id,
      [&](const v1::JobEvent& event) {
        printer.OnEvent(event);
        if (!event.has_fetched() || fetch_directory.empty() || !write_error.ok()) return;
        write_error = WriteFetchedTensor(fetch_directory, event.fetched()).status();
        if (write_error.ok()) ++files;
      },
      &interruption);
  printer.Finish();
  if (interruption != 0 && watched.code() == absl::StatusCode::kCancelled) {
    ReportInterruptedWatch(command, job_id, printer, interruption, error);
    if (files > 0) error << files << " fetched tensors were written to " << fetch_directory << "\n";
    return ExitCodeOfSignal(interruption);
  }
  if (!watched.ok()) return ReportRpcError(command, watched, error);

  v1::JobState state = printer.last_state();
  v1::JobError job_error = printer.last_error();
  const bool fetching = !fetch_directory.empty();
  std::optional<v1::JobInfo> info;
  if (!IsTerminal(state) || (fetching && files == 0)) {
    // The stream ended without the terminal event (a daemon that dropped events), or no fetched
    // tensor came: ask.
    absl::StatusOr<v1::JobInfo> got = client.GetJob(job_id);
    if (!got.ok()) return ReportRpcError(command, got.status(), error);
    info = *std::move(got);
    if (!IsTerminal(state)) {
      state = info->state();
      job_error = info->error();
    }
  }
  int exit_code = cli::kExitSuccess;
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      break;
    case v1::JOB_STATE_CANCELLED:
      error << command << ": job " << job_id << " was cancelled: " << FormatJobError(job_error)
            << "\n";
      exit_code = cli::kExitJobCancelled;
      break;
    case v1::JOB_STATE_FAILED:
      error << command << ": job " << job_id << " failed: " << FormatJobError(job_error) << "\n";
      exit_code = cli::kExitFailure;
      break;
    default:
      error << command << ": the watch of job " << job_id << " ended while the job is "
            << JobStateName(state) << "\n";
      exit_code = cli::kExitUnreachable;
  }
  if (!fetching) return exit_code;
  if (!write_error.ok()) {
    error << command << ": " << write_error.message() << " (" << files
          << " fetched tensors were written before it)\n";
    return exit_code == cli::kExitSuccess ? cli::kExitFailure : exit_code;
  }
  if (files > 0) {
    error << "fetched: " << files << " .npy files in " << fetch_directory << "\n";
  } else if (exit_code == cli::kExitSuccess) {
    error << command << ": job " << job_id << " sent no fetched tensors to write to "
          << fetch_directory << ": "
          << (!info->streams_fetches()
                  ? "it was not submitted to stream them (loomctl submit --fetch-dir, "
                    "SubmitJobRequest.stream_fetches)"
              : info->fetches_released()
                  ? "the coordinator released them when a later job streamed its own"
                  : "none came")
          << "\n";
    return cli::kExitFailure;
  }
  return exit_code;
}

}  // namespace loom::loomctl
