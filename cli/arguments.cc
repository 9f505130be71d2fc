#include "cli/arguments.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom::cli {

absl::Status UsageError(absl::string_view command, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(command, ": ", message, " (see '", command, " --help')"));
}

namespace {

bool IsHelp(const std::string& argument) { return argument == "--help" || argument == "-h"; }

// Pads `text` with spaces to `width` columns.
std::string PadRight(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

// Help lines are wrapped to this many columns where the words allow.
constexpr size_t kHelpColumns = 100;

// Appends `rows` (left column, right column) as an indented two-column list; the right column
// wraps at word boundaries.
void AppendColumns(const std::vector<std::pair<std::string, std::string>>& rows,
                   std::string* text) {
  size_t width = 0;
  for (const auto& [left, right] : rows) width = std::max(width, left.size());
  const size_t indent = 2 + width + 2;
  const size_t room = kHelpColumns > indent + 20 ? kHelpColumns - indent : 20;
  for (const auto& [left, right] : rows) {
    std::string line = absl::StrCat("  ", PadRight(left, width), "  ");
    size_t used = 0;
    for (absl::string_view word : absl::StrSplit(right, ' ', absl::SkipEmpty())) {
      if (used > 0 && used + 1 + word.size() > room) {
        line += "\n" + std::string(indent, ' ');
        used = 0;
      }
      if (used > 0) {
        line += ' ';
        ++used;
      }
      absl::StrAppend(&line, word);
      used += word.size();
    }
    absl::StrAppend(text, line, "\n");
  }
}

}  // namespace

ArgumentSpec::ArgumentSpec(std::string command, std::string description)
    : command_(std::move(command)), description_(std::move(description)) {}

ArgumentSpec& ArgumentSpec::AddFlag(const std::string& name, const std::string& value_name,
                                    const std::string& default_value, const std::string& help) {
  flags_.push_back(Flag{name, value_name.empty() ? "VALUE" : value_name, default_value, help});
  return *this;
}

ArgumentSpec& ArgumentSpec::AddRepeatedFlag(const std::string& name,
                                            const std::string& value_name,
                                            const std::string& help) {
  flags_.push_back(Flag{name, value_name.empty() ? "VALUE" : value_name, "",
                        absl::StrCat(help, " (may be given several times)"), true});
  return *this;
}

ArgumentSpec& ArgumentSpec::AddSwitch(const std::string& name, const std::string& help) {
  flags_.push_back(Flag{name, "", "false", help});
  return *this;
}

ArgumentSpec& ArgumentSpec::AddPositional(const std::string& name, const std::string& help) {
  positionals_.push_back(Positional{name, help, /*optional=*/false});
  return *this;
}

ArgumentSpec& ArgumentSpec::AddOptionalPositional(const std::string& name,
                                                  const std::string& help) {
  positionals_.push_back(Positional{name, help, /*optional=*/true});
  return *this;
}

const ArgumentSpec::Flag* ArgumentSpec::FindFlag(const std::string& name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

std::string ArgumentSpec::FlagList() const {
  std::vector<std::string> names;
  for (const Flag& flag : flags_) names.push_back("--" + flag.name);
  names.push_back("--help");
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<ParsedArguments> ArgumentSpec::Parse(
    const std::vector<std::string>& arguments) const {
  ParsedArguments parsed;
  for (const Flag& flag : flags_) parsed.defaults_[flag.name] = flag.default_value;
  // --help wins over every other problem: whoever asks for help gets it.
  for (const std::string& argument : arguments) {
    if (argument == "--") break;
    if (IsHelp(argument)) {
      parsed.help_requested_ = true;
      return parsed;
    }
  }

  bool flags_ended = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (flags_ended || !absl::StartsWith(argument, "--")) {
      if (!flags_ended && absl::StartsWith(argument, "-") && argument.size() > 1) {
        return UsageError(command_, absl::StrCat("unknown flag '", argument,
                                                 "'; flags are written --name (", FlagList(), ")"));
      }
      parsed.positionals_.push_back(argument);
      continue;
    }
    if (argument == "--") {
      flags_ended = true;
      continue;
    }
    std::string name = argument.substr(2);
    std::optional<std::string> value;
    if (size_t equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) {
      return UsageError(command_, absl::StrCat("unknown flag '--", name, "'; ", command_,
                                               " accepts ", FlagList()));
    }
    if (parsed.values_.contains(name) && !flag->repeated) {
      return UsageError(command_, absl::StrCat("flag '--", name, "' is given twice"));
    }
    if (flag->value_name.empty()) {
      // A switch: --name, --name=true or --name=false.
      if (!value.has_value()) {
        value = "true";
      } else if (*value == "1") {
        value = "true";
      } else if (*value == "0") {
        value = "false";
      } else if (*value != "true" && *value != "false") {
        return UsageError(command_,
                          absl::StrCat("switch '--", name,
                                       "' takes no value (or =true / =false), not '", *value, "'"));
      }
    } else if (!value.has_value()) {
      if (i + 1 >= arguments.size()) {
        return UsageError(command_, absl::StrCat("flag '--", name, "' needs a value: --", name, " ",
                                                 flag->value_name));
      }
      const std::string& next = arguments[i + 1];
      if (absl::StartsWith(next, "--")) {
        return UsageError(
            command_,
            absl::StrCat("flag '--", name, "' needs a value (--", name, " ", flag->value_name,
                         "), but the next argument is the flag '", next, "'"));
      }
      value = next;
      ++i;
    }
    parsed.values_[name] = *value;
    if (flag->repeated) parsed.repeated_values_[name].push_back(*value);
  }

  size_t required = 0;
  for (const Positional& positional : positionals_) required += positional.optional ? 0 : 1;
  if (parsed.positionals_.size() < required) {
    std::vector<std::string> missing;
    for (size_t p = parsed.positionals_.size(); p < positionals_.size(); ++p) {
      if (!positionals_[p].optional) missing.push_back(positionals_[p].name);
    }
    return UsageError(command_,
                      absl::StrCat("missing ", absl::StrJoin(missing, " and "), "; ", Usage()));
  }
  if (parsed.positionals_.size() > positionals_.size()) {
    return UsageError(
        command_, absl::StrCat("unexpected argument '", parsed.positionals_[positionals_.size()],
                               "'; ", Usage()));
  }
  return parsed;
}

std::string ArgumentSpec::Usage() const {
  std::string usage = absl::StrCat("usage: ", command_);
  for (const Positional& positional : positionals_) {
    absl::StrAppend(&usage, positional.optional ? " [" : " ", positional.name,
                    positional.optional ? "]" : "");
  }
  absl::StrAppend(&usage, " [flags]");
  return usage;
}

std::string ArgumentSpec::Help() const {
  std::string text = absl::StrCat(Usage(), "\n\n", description_, "\n");
  if (!positionals_.empty()) {
    text += "\narguments:\n";
    std::vector<std::pair<std::string, std::string>> rows;
    for (const Positional& positional : positionals_) {
      rows.emplace_back(positional.name, positional.help);
    }
    AppendColumns(rows, &text);
  }
  text += "\nflags:\n";
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Flag& flag : flags_) {
    std::string left = absl::StrCat("--", flag.name);
    std::string right = flag.help;
    if (!flag.value_name.empty()) {
      absl::StrAppend(&left, " ", flag.value_name);
      if (!flag.default_value.empty()) {
        absl::StrAppend(&right, " (default: ", flag.default_value, ")");
      }
    }
    rows.emplace_back(std::move(left), std::move(right));
  }
  rows.emplace_back("--help", "show this help");
  AppendColumns(rows, &text);
  return text;
}

std::string ParsedArguments::Value(const std::string& name) const {
  if (auto found = values_.find(name); found != values_.end()) return found->second;
  if (auto found = defaults_.find(name); found != defaults_.end()) return found->second;
  return "";
}

bool ParsedArguments::Switch(const std::string& name) const { return Value(name) == "true"; }

std::vector<std::string> ParsedArguments::Values(const std::string& name) const {
  if (auto found = repeated_values_.find(name); found != repeated_values_.end()) {
    return found->second;
  }
  return {};
}

std::string SubcommandHelp(const std::vector<Subcommand>& subcommands) {
  std::string text =
      "usage: loomctl COMMAND [arguments] [flags]\n\n"
      "Loom's command-line client.\n\ncommands:\n";
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Subcommand& subcommand : subcommands) {
    rows.emplace_back(subcommand.name, subcommand.summary);
  }
  rows.emplace_back("help", "show this list, or 'help COMMAND' for a command's flags");
  AppendColumns(rows, &text);
  text += "\nRun 'loomctl COMMAND --help' for the arguments and flags of a command.\n";
  return text;
}

int DispatchSubcommand(const std::vector<Subcommand>& subcommands,
                       const std::vector<std::string>& arguments, std::ostream& out,
                       std::ostream& error) {
  if (arguments.empty()) {
    error << SubcommandHelp(subcommands);
    return kExitUsage;
  }
  std::string name = arguments[0];
  std::vector<std::string> rest(arguments.begin() + 1, arguments.end());
  if (IsHelp(name) || (name == "help" && rest.empty())) {
    out << SubcommandHelp(subcommands);
    return kExitSuccess;
  }
  if (name == "help") {
    name = rest[0];
    rest = {"--help"};
  }
  for (const Subcommand& subcommand : subcommands) {
    if (subcommand.name == name) return subcommand.run(rest, out, error);
  }
  std::vector<std::string> names;
  for (const Subcommand& subcommand : subcommands) names.push_back(subcommand.name);
  error << "loomctl: unknown command '" << name << "'; commands are " << absl::StrJoin(names, ", ")
        << " (see 'loomctl --help')\n";
  return kExitUsage;
}

}  // namespace loom::cli
