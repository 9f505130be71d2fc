// loomctl: Loom's command-line client. `loomctl COMMAND [arguments] [flags]`; `loomctl --help`
// lists the commands.
#include <iostream>
#include <string>
#include <vector>

#include "client/loomctl/arguments.h"
#include "client/loomctl/compile_command.h"
#include "client/loomctl/run_command.h"
#include "client/loomctl/run_plan_command.h"
#include "glog/logging.h"

int main(int argc, char** argv) {
  // Diagnostics go to stderr, warnings and errors only; `--verbose` (per command) shows INFO.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();

  // Later commands (submit, ...) join this table.
  std::vector<loom::loomctl::Subcommand> subcommands = {
      loom::loomctl::CompileSubcommand(),
      loom::loomctl::RunSubcommand(),
      loom::loomctl::RunPlanSubcommand(),
  };
  std::vector<std::string> arguments(argv + 1, argv + argc);
  return loom::loomctl::DispatchSubcommand(subcommands, arguments, std::cout, std::cerr);
}
