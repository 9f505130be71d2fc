// loomctl: Loom's command-line client. `loomctl COMMAND [arguments] [flags]`; `loomctl --help`
// lists the commands.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cli/arguments.h"
#include "glog/logging.h"
#include "tools/loomctl/cluster_up_down_command.h"
#include "tools/loomctl/job_and_node_commands.h"
#include "tools/loomctl/compile_command.h"
#include "tools/loomctl/run_command.h"
#include "tools/loomctl/run_plan_command.h"
#include "tools/loomctl/submit_command.h"

int main(int argc, char** argv) {
  // Diagnostics go to stderr, warnings and errors only; `--verbose` (per command) shows INFO.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  google::InitGoogleLogging(argv[0]);
  // Debian's Abseil is built with assertions, whose absl::Mutex aborts the process on a lock-order
  // cycle it merely could deadlock on; a daemon reports such a cycle in its log instead (the
  // tests, which keep the default, abort on one).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kReport);
  google::InstallFailureSignalHandler();
  // glog's handler reports SIGTERM as a crash, with a stack trace; for a command it is how it is
  // asked to stop (`timeout`, a job scheduler): ended as by default, quietly.
  signal(SIGTERM, SIG_DFL);

  std::vector<loom::cli::Subcommand> subcommands = {
      // On this machine.
      loom::loomctl::CompileSubcommand(),
      loom::loomctl::RunSubcommand(),
      loom::loomctl::RunPlanSubcommand(),
      // Against a cluster's coordinator.
      loom::loomctl::SubmitSubcommand(),
      loom::loomctl::WatchSubcommand(),
      loom::loomctl::StatusSubcommand(),
      loom::loomctl::JobsSubcommand(),
      loom::loomctl::CancelSubcommand(),
      loom::loomctl::NodesSubcommand(),
      loom::loomctl::PlanSubcommand(),
      loom::loomctl::TraceSubcommand(),
      loom::loomctl::ClusterSubcommand(),
  };
  std::vector<std::string> arguments(argv + 1, argv + argc);
  return loom::cli::DispatchSubcommand(subcommands, arguments, std::cout, std::cerr);
}
