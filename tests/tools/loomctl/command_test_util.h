#ifndef LOOM_TESTS_TOOLS_LOOMCTL_COMMAND_TEST_UTIL_H_
#define LOOM_TESTS_TOOLS_LOOMCTL_COMMAND_TEST_UTIL_H_

#include <string>
#include <vector>

#include "cli/arguments.h"

namespace loom::loomctl {

// What a loomctl subcommand printed and returned.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string error;
};

// Runs `subcommand` in-process on `arguments`, capturing stdout and stderr.
CommandResult RunSubcommandCapturing(const cli::Subcommand& subcommand,
                                     const std::vector<std::string>& arguments);

}  // namespace loom::loomctl

#endif  // LOOM_TESTS_TOOLS_LOOMCTL_COMMAND_TEST_UTIL_H_
