#include "tests/tools/loomctl/command_test_util.h"

#include <sstream>

namespace loom::loomctl {

CommandResult RunSubcommandCapturing(const cli::Subcommand& subcommand,
                                     const std::vector<std::string>& arguments) {
  std::ostringstream out;
  std::ostringstream error;
  CommandResult result;
  result.exit_code = subcommand.run(arguments, out, error);
  result.out = out.str();
  result.error = error.str();
  return result;
}

}  // namespace loom::loomctl
