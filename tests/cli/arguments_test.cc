// The loomctl argument parser and subcommand dispatch.
#include "cli/arguments.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::loomctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

cli::ArgumentSpec TestSpec() {
  cli::ArgumentSpec spec("loomctl test", "A command for tests.");
  spec.AddPositional("PLAN", "the plan")
      .AddFlag("trace", "PATH", "", "where the trace goes")
      .AddFlag("stall-timeout", "DURATION", "10s", "how long before a stall")
      .AddSwitch("verbose", "say more");
  return spec;
}

TEST(ArgumentSpecTest, SeparateAndEqualsValues) {
  auto parsed = TestSpec().Parse({"plan.pbtxt", "--trace", "out.json", "--stall-timeout=2s"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->help_requested());
  EXPECT_THAT(parsed->positionals(), ElementsAre("plan.pbtxt"));
  EXPECT_TRUE(parsed->Has("trace"));
  EXPECT_EQ(parsed->Value("trace"), "out.json");
  EXPECT_EQ(parsed->Value("stall-timeout"), "2s");
  EXPECT_FALSE(parsed->Switch("verbose"));
}

TEST(ArgumentSpecTest, EqualsValueMayContainEqualsAndBeEmpty) {
  auto parsed = TestSpec().Parse({"--trace=a=b.json", "plan"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Value("trace"), "a=b.json");
  parsed = TestSpec().Parse({"--trace=", "plan"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Has("trace"));
  EXPECT_EQ(parsed->Value("trace"), "");
}

TEST(ArgumentSpecTest, DefaultsWhenNotGiven) {
  auto parsed = TestSpec().Parse({"plan"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->Has("stall-timeout"));
  EXPECT_EQ(parsed->Value("stall-timeout"), "10s");
  EXPECT_EQ(parsed->Value("trace"), "");
}

TEST(ArgumentSpecTest, FlagsMayComeBeforeThePositional) {
  auto parsed = TestSpec().Parse({"--verbose", "--trace", "t.json", "plan"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Switch("verbose"));
  EXPECT_THAT(parsed->positionals(), ElementsAre("plan"));
}

TEST(ArgumentSpecTest, SwitchValues) {
  auto parsed = TestSpec().Parse({"plan", "--verbose=false"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->Switch("verbose"));
  parsed = TestSpec().Parse({"plan", "--verbose=true"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Switch("verbose"));
  parsed = TestSpec().Parse({"plan", "--verbose=loud"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--verbose"));
}

TEST(ArgumentSpecTest, UnknownFlagIsNamedWithTheAcceptedOnes) {
  auto parsed = TestSpec().Parse({"plan", "--tracee", "x"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown flag '--tracee'"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("--trace"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("loomctl test --help"));

  parsed = TestSpec().Parse({"plan", "--bogus=1"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown flag '--bogus'"));

  parsed = TestSpec().Parse({"plan", "-t"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown flag '-t'"));
}

TEST(ArgumentSpecTest, MissingValue) {
  auto parsed = TestSpec().Parse({"plan", "--trace"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("'--trace' needs a value"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("--trace PATH"));

  // The next argument is a flag, not a value.
  parsed = TestSpec().Parse({"plan", "--trace", "--verbose"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("'--trace' needs a value"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("'--verbose'"));
}

TEST(ArgumentSpecTest, FlagGivenTwice) {
  auto parsed = TestSpec().Parse({"plan", "--trace", "a", "--trace=b"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("'--trace' is given twice"));
}

TEST(ArgumentSpecTest, RepeatedFlagKeepsEveryValueInOrder) {
  cli::ArgumentSpec spec("loomd", "A daemon.");
  spec.AddRepeatedFlag("data-root", "DIR", "a root").AddFlag("listen", "ADDRESS", "", "where");
  auto parsed = spec.Parse({"--data-root", "/a", "--listen", "x:1", "--data-root=/b"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->Values("data-root"), ElementsAre("/a", "/b"));
  EXPECT_THAT(parsed->Values("listen"), IsEmpty());
  parsed = spec.Parse({});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->Values("data-root"), IsEmpty());
  EXPECT_THAT(spec.Help(), HasSubstr("may be given several times"));
}

TEST(ArgumentSpecTest, PositionalCount) {
  auto parsed = TestSpec().Parse({"--verbose"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(),
              HasSubstr(absl::StrCat("missing PLAN; ", TestSpec().Usage(), " (see")));
  parsed = TestSpec().Parse({"a", "b"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(),
              HasSubstr(absl::StrCat("unexpected argument 'b'; ", TestSpec().Usage(), " (see")));
}

TEST(ArgumentSpecTest, OptionalPositional) {
  cli::ArgumentSpec spec("loomctl test", "A command for tests.");
  spec.AddOptionalPositional("JOB", "the job").AddSwitch("list", "list things");
  EXPECT_EQ(spec.Usage(), "usage: loomctl test [JOB] [flags]");
  auto parsed = spec.Parse({"--list"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->positionals(), IsEmpty());
  parsed = spec.Parse({"job.pbtxt"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->positionals(), ElementsAre("job.pbtxt"));
  parsed = spec.Parse({"a", "b"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("unexpected argument 'b'"));

  // Required positionals are still required when an optional one follows them.
  parsed = cli::ArgumentSpec("loomctl test", "")
               .AddPositional("PLAN", "the plan")
               .AddOptionalPositional("OUT", "the output")
               .Parse({});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("missing PLAN;"));
}

TEST(ArgumentSpecTest, DoubleDashEndsFlags) {
  auto parsed = TestSpec().Parse({"--verbose", "--", "--plan-with-dashes"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->positionals(), ElementsAre("--plan-with-dashes"));
  // A lone dash is a positional (standard input, by convention).
  parsed = TestSpec().Parse({"-"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->positionals(), ElementsAre("-"));
}

TEST(ArgumentSpecTest, HelpWinsOverOtherProblems) {
  for (const char* help : {"--help", "-h"}) {
    auto parsed = TestSpec().Parse({"--bogus", help});
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(parsed->help_requested());
  }
}

TEST(ArgumentSpecTest, HelpListsEveryFlagWithItsDefault) {
  std::string help = TestSpec().Help();
  EXPECT_THAT(help, HasSubstr("usage: loomctl test PLAN [flags]"));
  EXPECT_THAT(help, HasSubstr("A command for tests."));
  EXPECT_THAT(help, HasSubstr("--trace PATH"));
  EXPECT_THAT(help, HasSubstr("--stall-timeout DURATION"));
  EXPECT_THAT(help, HasSubstr("(default: 10s)"));
  EXPECT_THAT(help, HasSubstr("--verbose"));
  EXPECT_THAT(help, HasSubstr("--help"));
}

class DispatchTest : public ::testing::Test {
 protected:
  DispatchTest() {
    subcommands_.push_back(cli::Subcommand{
        "echo", "prints its arguments",
        [this](const std::vector<std::string>& arguments, std::ostream& out, std::ostream&) {
          received_ = arguments;
          out << "echo ran";
          return 7;
        }});
    subcommands_.push_back(cli::Subcommand{
        "other", "does nothing",
        [](const std::vector<std::string>&, std::ostream&, std::ostream&) { return 0; }});
  }

  int Dispatch(const std::vector<std::string>& arguments) {
    out_.str("");
    error_.str("");
    return cli::DispatchSubcommand(subcommands_, arguments, out_, error_);
  }

  std::vector<cli::Subcommand> subcommands_;
  std::vector<std::string> received_;
  std::ostringstream out_;
  std::ostringstream error_;
};

TEST_F(DispatchTest, RunsTheNamedSubcommandWithTheRest) {
  EXPECT_EQ(Dispatch({"echo", "a", "--b=c"}), 7);
  EXPECT_THAT(received_, ElementsAre("a", "--b=c"));
  EXPECT_EQ(out_.str(), "echo ran");
}

TEST_F(DispatchTest, HelpListsSubcommands) {
  for (const auto& arguments : std::vector<std::vector<std::string>>{{"--help"}, {"help"}}) {
    EXPECT_EQ(Dispatch(arguments), cli::kExitSuccess);
    EXPECT_THAT(out_.str(), HasSubstr("echo"));
    EXPECT_THAT(out_.str(), HasSubstr("prints its arguments"));
    EXPECT_THAT(out_.str(), HasSubstr("other"));
  }
}

TEST_F(DispatchTest, HelpCommandAsksTheSubcommand) {
  EXPECT_EQ(Dispatch({"help", "echo"}), 7);
  EXPECT_THAT(received_, ElementsAre("--help"));
}

TEST_F(DispatchTest, NothingIsAUsageError) {
  EXPECT_EQ(Dispatch({}), cli::kExitUsage);
  EXPECT_THAT(error_.str(), HasSubstr("usage: loomctl COMMAND"));
}

TEST_F(DispatchTest, UnknownSubcommand) {
  EXPECT_EQ(Dispatch({"compile-everything"}), cli::kExitUsage);
  EXPECT_THAT(error_.str(), HasSubstr("unknown command 'compile-everything'"));
  EXPECT_THAT(error_.str(), HasSubstr("echo, other"));
  EXPECT_THAT(out_.str(), IsEmpty());
}

}  // namespace
}  // namespace loom::loomctl
