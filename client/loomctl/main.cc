// loomctl: Loom's command-line client. `loomctl COMMAND [arguments] [flags]`; `loomctl --help`
// lists the commands.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "client/loomctl/arguments.h"
#include "client/loomctl/cluster_command.h"
#include "client/loomctl/cluster_commands.h"
#include "client/loomctl/compile_command.h"
#include "client/loomctl/run_command.h"
#include "client/loomctl/run_plan_command.h"
#include "client/loomctl/submit_command.h"
#include "glog/logging.h"

int main(int argc, char** argv) {
  // Diagnostics go to stderr, warnings and errors only; `--verbose` (per command) shows INFO.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  // glog's handler reports SIGTERM as a crash, with a stack trace; for a command it is how it is
  // asked to stop (`timeout`, a job scheduler): ended as by default, quietly.
  signal(SIGTERM, SIG_DFL);

  std::vector<loom::loomctl::Subcommand> subcommands = {
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
  return loom::loomctl::DispatchSubcommand(subcommands, arguments, std::cout, std::cerr);
}
