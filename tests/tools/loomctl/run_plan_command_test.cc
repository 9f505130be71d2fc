// `loomctl run-plan`, run in-process on plans written to temporary files.
#include "tools/loomctl/run_plan_command.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan_text.h"
#include "testing/plan_builder.h"
#include "tests/core/json_test_util.h"
#include "tests/tools/loomctl/command_test_util.h"

namespace loom::loomctl {
namespace {

using ::loom::testing::JsonValue;
using ::loom::testing::ParseJson;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// source (fill 2) on cpu:0 -> scale by 3 on cpu:1 -> sink on cpu:1, `pieces` pieces of [16].
plan::Plan ScalePlan(int pieces, int64_t budget_bytes = 0) {
  PlanBuilder builder("scale_job");
  builder.AddCpuDevices(2, budget_bytes);
  builder.AddRegister("x", {16}).AddRegister("y", {16});
  plan::Task& source = builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "fill");
  source.set_num_pieces(pieces);
  PlanBuilder::SetFloatAttribute(source, "value", 2.0);
  plan::Task& scale = builder.AddTask("scale", plan::COMPUTE, 1, {"x"}, {"y"}, "scale");
  PlanBuilder::SetFloatAttribute(scale, "scale", 3.0);
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  return builder.plan();
}

std::string WritePlan(const plan::Plan& plan, const std::string& name) {
  std::string path = TempPath(name);
  absl::Status status = WritePlanFile(plan, path);
  EXPECT_TRUE(status.ok()) << status;
  return path;
}

CommandResult RunCommand(const std::vector<std::string>& arguments) {
  return RunSubcommandCapturing(RunPlanSubcommand(), arguments);
}

absl::StatusOr<RunPlanOptions> ParseOptions(const std::vector<std::string>& arguments) {
  absl::StatusOr<cli::ParsedArguments> parsed = RunPlanArgumentSpec().Parse(arguments);
  if (!parsed.ok()) return parsed.status();
  return RunPlanOptionsFrom(*parsed);
}

TEST(RunPlanOptionsTest, Defaults) {
  absl::StatusOr<RunPlanOptions> options = ParseOptions({"plan.pbtxt"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->plan_path, "plan.pbtxt");
  EXPECT_EQ(options->stall_timeout, absl::Seconds(10));
  EXPECT_EQ(options->blas_threads, 1);
  EXPECT_EQ(options->output, OutputFormat::kText);
  EXPECT_THAT(options->trace_path, IsEmpty());
  EXPECT_THAT(options->fetch_directory, IsEmpty());
  EXPECT_FALSE(options->verbose);
}

TEST(RunPlanOptionsTest, EveryFlag) {
  absl::StatusOr<RunPlanOptions> options =
      ParseOptions({"p.pbtxt", "--trace", "t.json", "--stall-timeout=1.5s", "--blas-threads", "4",
                    "--output=json", "--fetch-dir", "out", "--verbose"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->trace_path, "t.json");
  EXPECT_EQ(options->stall_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options->blas_threads, 4);
  EXPECT_EQ(options->output, OutputFormat::kJson);
  EXPECT_EQ(options->fetch_directory, "out");
  EXPECT_TRUE(options->verbose);
}

TEST(RunPlanOptionsTest, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> arguments;
    std::string message;
  };
  for (const Case& test_case : std::vector<Case>{
           {{"p", "--stall-timeout", "10"}, "--stall-timeout: '10' is not a duration"},
           {{"p", "--stall-timeout", "-1s"}, "--stall-timeout must be positive"},
           {{"p", "--stall-timeout", "0s"}, "--stall-timeout must be positive"},
           {{"p", "--blas-threads", "0"}, "--blas-threads must be a whole number >= 1"},
           {{"p", "--blas-threads", "two"}, "--blas-threads must be a whole number >= 1"},
           {{"p", "--output", "xml"}, "--output must be 'text' or 'json', not 'xml'"},
           {{"p", "--trace="}, "--trace needs a file path"},
           {{"p", "--fetch-dir="}, "--fetch-dir needs a directory"},
       }) {
    absl::StatusOr<RunPlanOptions> options = ParseOptions(test_case.arguments);
    ASSERT_FALSE(options.ok()) << test_case.message;
    EXPECT_THAT(options.status().message(), HasSubstr(test_case.message));
  }
}

TEST(RunPlanCommandTest, HelpListsTheFlags) {
  CommandResult result = RunCommand({"--help"});
  EXPECT_EQ(result.exit_code, cli::kExitSuccess);
  for (const char* flag :
       {"--trace PATH", "--trace-steps K[-L]", "--stall-timeout DURATION", "--blas-threads N",
        "--output text|json", "--fetch-dir DIR", "--verbose"}) {
    EXPECT_THAT(result.out, HasSubstr(flag));
  }
}

TEST(RunPlanCommandTest, UsageErrorsExitWithTwo) {
  CommandResult result = RunCommand({"plan.pbtxt", "--no-such-flag"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("unknown flag '--no-such-flag'"));
  result = RunCommand({});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("missing PLAN"));
  result = RunCommand({"plan.pbtxt", "--output", "yaml"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
}

TEST(RunPlanCommandTest, PrintsTheSummaryTable) {
  std::string plan = WritePlan(ScalePlan(8), "run_plan_table.pbtxt");
  CommandResult result = RunCommand({plan});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.error, IsEmpty());
  for (const char* header : {"actor", "kind", "stream", "acts", "busy ms", "blocked-on-input ms",
                             "blocked-on-output ms", "waiting-for-thread ms"}) {
    EXPECT_THAT(result.out, HasSubstr(header));
  }
  // One row per actor, with its kind, stream and 8 acts.
  std::istringstream lines(result.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    for (const char* actor : {"source ", "scale ", "sink "}) {
      if (line.rfind(actor, 0) != 0) continue;
      ++rows;
      std::istringstream fields(line);
      std::string name, kind, stream, acts;
      fields >> name >> kind >> stream >> acts;
      EXPECT_EQ(acts, "8") << line;
      EXPECT_EQ(stream, name == "source" ? "node0/cpu:0/compute" : "node0/cpu:1/compute");
      EXPECT_EQ(kind, name == "scale" ? "compute" : name);
    }
  }
  EXPECT_EQ(rows, 3) << result.out;
  EXPECT_THAT(result.out, HasSubstr("job 'scale_job': 3 actors on 2 stream threads"));
  EXPECT_THAT(result.out, HasSubstr("makespan: "));
  EXPECT_THAT(result.out, HasSubstr("peak memory:"));
  EXPECT_THAT(result.out, HasSubstr("node0/cpu:0"));
  EXPECT_THAT(result.out, HasSubstr("node0/cpu:1"));
  EXPECT_THAT(result.out, HasSubstr("(no budget)"));
}

TEST(RunPlanCommandTest, JsonOutputTraceAndFetchedPieces) {
  std::string plan = WritePlan(ScalePlan(5), "run_plan_json.pbtxt");
  std::string trace = TempPath("run_plan_json_trace.json");
  std::string fetch = TempPath("run_plan_json_fetch");
  std::filesystem::remove_all(fetch);
  CommandResult result =
      RunCommand({plan, "--output", "json", "--trace", trace, "--fetch-dir", fetch});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;

  absl::StatusOr<JsonValue> json = ParseJson(result.out);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << result.out;
  EXPECT_EQ(json->Find("job_name")->string, "scale_job");
  EXPECT_EQ(json->Find("status")->string, "ok");
  EXPECT_EQ(json->Find("error"), nullptr);
  EXPECT_GT(json->Find("makespan_ms")->number, 0.0);
  const JsonValue* actors = json->Find("actors");
  ASSERT_NE(actors, nullptr);
  ASSERT_EQ(actors->array.size(), 3u);
  for (const JsonValue& actor : actors->array) {
    EXPECT_EQ(actor.Find("acts")->number, 5) << actor.Find("name")->string;
    for (const char* field : {"kind", "stream", "busy_ms", "blocked_on_input_ms",
                              "blocked_on_output_ms", "waiting_for_thread_ms"}) {
      EXPECT_NE(actor.Find(field), nullptr) << field;
    }
  }
  const JsonValue* devices = json->Find("devices");
  ASSERT_EQ(devices->array.size(), 2u);
  EXPECT_EQ(devices->array[1].Find("device")->string, "node0/cpu:1");
  EXPECT_GT(devices->array[1].Find("peak_bytes")->number, 0);
  EXPECT_EQ(json->Find("trace")->string, trace);
  ASSERT_EQ(json->Find("fetched_files")->array.size(), 5u);

  // The trace: one complete event per act.
  absl::StatusOr<JsonValue> trace_json = ParseJson(ReadFile(trace));
  ASSERT_TRUE(trace_json.ok()) << trace_json.status();
  int complete_events = 0;
  for (const JsonValue& event : trace_json->Find("traceEvents")->array) {
    if (event.Find("ph")->string == "X") ++complete_events;
  }
  EXPECT_EQ(complete_events, 15);

  // The fetched pieces: sink_y_<piece>.npy, each 16 floats of 2 * 3.
  for (int piece = 0; piece < 5; ++piece) {
    std::string path = fetch + "/sink_y_" + std::to_string(piece) + ".npy";
    EXPECT_EQ(json->Find("fetched_files")->array[piece].string, path);
    std::string file = ReadFile(path);
    ASSERT_GE(file.size(), 10u) << path;
    size_t data_offset =
        10 + (static_cast<unsigned char>(file[8]) | static_cast<unsigned char>(file[9]) << 8);
    EXPECT_EQ(data_offset % 64, 0u);
    ASSERT_EQ(file.size(), data_offset + 16 * sizeof(float)) << path;
    EXPECT_THAT(file.substr(0, data_offset), HasSubstr("'descr': '<f4'"));
    EXPECT_THAT(file.substr(0, data_offset), HasSubstr("'shape': (16,)"));
    std::vector<float> values(16);
    std::memcpy(values.data(), file.data() + data_offset, 16 * sizeof(float));
    for (float value : values) EXPECT_EQ(value, 6.0f) << path;
  }
}

TEST(RunPlanCommandTest, TraceStepsRecordsOnlyThoseStepsActs) {
  // Five steps of one piece each (the plan's tasks have no pieces_per_step).
  std::string plan = WritePlan(ScalePlan(5), "run_plan_trace_steps.pbtxt");
  std::string trace = TempPath("run_plan_trace_steps.json");
  CommandResult result = RunCommand({plan, "--trace", trace, "--trace-steps", "2-3"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  absl::StatusOr<JsonValue> trace_json = ParseJson(ReadFile(trace));
  ASSERT_TRUE(trace_json.ok()) << trace_json.status();
  std::vector<std::pair<double, double>> steps_and_pieces;
  for (const JsonValue& event : trace_json->Find("traceEvents")->array) {
    if (event.Find("ph")->string != "X") continue;
    steps_and_pieces.emplace_back(event.Find("args")->Find("step")->number,
                                  event.Find("args")->Find("piece")->number);
  }
  // The source's, the scale's and the sink's acts on pieces 1 and 2, steps 2 and 3.
  ASSERT_EQ(steps_and_pieces.size(), 6u);
  for (const auto& [step, piece] : steps_and_pieces) {
    EXPECT_EQ(step, piece + 1);
    EXPECT_TRUE(step == 2 || step == 3) << step;
  }

  result = RunCommand({plan, "--trace", trace, "--trace-steps", "5-6"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("--trace-steps 5-6 is not within the plan's steps 1-5"));
  result = RunCommand({plan, "--trace-steps", "2"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("--trace-steps needs --trace"));
}

TEST(RunPlanCommandTest, InvalidPlanExitsWithTwoAndNamesTheCulprit) {
  plan::Plan plan = ScalePlan(4);
  plan.mutable_tasks(1)->set_inputs(0, "no_such_register");
  std::string path = WritePlan(plan, "run_plan_invalid.pbtxt");
  CommandResult result = RunCommand({path});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("invalid plan"));
  EXPECT_THAT(result.error, HasSubstr("task 'scale' reads register 'no_such_register'"));
  EXPECT_THAT(result.out, IsEmpty());
}

// source -> x -> b, which an accumulation of 2 pieces and z read; z also reads the sum,
// repeated. With one slot of b, z holds piece 0 of b waiting for the sum, which needs piece 1 of
// b, which x cannot write: a credit cycle plan validation does not see.
plan::Plan CreditCyclePlan(int b_slots) {
  PlanBuilder builder("credit_cycle");
  builder.AddCpuDevices(1);
  builder.AddRegister("a", {16}, plan::FLOAT32, 1)
      .AddRegister("b", {16}, plan::FLOAT32, b_slots)
      .AddRegister("sum", {16}, plan::FLOAT32, 1)
      .AddRegister("r", {16}, plan::FLOAT32, 1)
      .AddRegister("z", {16}, plan::FLOAT32, 1);
  plan::Task& source = builder.AddTask("source", plan::SOURCE, 0, {}, {"a"}, "fill");
  source.set_num_pieces(4);
  PlanBuilder::SetFloatAttribute(source, "value", 1.0);
  plan::Task& x = builder.AddTask("x", plan::COMPUTE, 0, {"a"}, {"b"}, "scale");
  PlanBuilder::SetFloatAttribute(x, "scale", 2.0);
  builder.AddTask("accumulate", plan::ACCUMULATE, 0, {"b"}, {"sum"}).set_factor(2);
  builder.AddTask("repeat", plan::REPEAT, 0, {"sum"}, {"r"}).set_factor(2);
  builder.AddTask("z", plan::COMPUTE, 0, {"b", "r"}, {"z"}, "add");
  builder.AddTask("sink", plan::SINK, 0, {"z"}, {});
  return builder.plan();
}

TEST(RunPlanCommandTest, APlanThatCannotFinishIsRefusedNamingTheCycle) {
  std::string path = WritePlan(CreditCyclePlan(1), "run_plan_credit_cycle.pbtxt");
  CommandResult result = RunCommand({path, "--stall-timeout", "60s"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("cannot finish"));
  EXPECT_THAT(result.error, HasSubstr("waits for a free slot of register 'b' (1 slot), held by"));
  EXPECT_THAT(result.out, IsEmpty());
  // A second slot of b breaks the cycle: the plan runs.
  path = WritePlan(CreditCyclePlan(2), "run_plan_credit_cycle_2.pbtxt");
  result = RunCommand({path});
  EXPECT_EQ(result.exit_code, 0) << result.error;
}

TEST(RunPlanCommandTest, UnreadablePlansExitWithTwo) {
  CommandResult result = RunCommand({TempPath("no_such_plan.pbtxt")});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("no_such_plan.pbtxt"));

  std::string path = TempPath("run_plan_garbage.pbtxt");
  std::ofstream(path) << "job_name: \"x\"\ntasks { nme: \"typo\" }\n";
  result = RunCommand({path});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("line 2"));
}

TEST(RunPlanCommandTest, UnknownKernelIsRejectedBeforeRunning) {
  plan::Plan plan = ScalePlan(4);
  plan.mutable_tasks(1)->mutable_kernel()->set_op_type("no_such_op");
  CommandResult result = RunCommand({WritePlan(plan, "run_plan_unknown_op.pbtxt")});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("scale"));
  EXPECT_THAT(result.error, HasSubstr("no_such_op"));
}

TEST(RunPlanCommandTest, FailedJobExitsWithOneAndNamesTheCulprit) {
  // Registers take 2 x 2 x 64 bytes on cpu:1; the sink's copies (64 bytes a piece) overflow.
  plan::Plan plan = ScalePlan(50, /*budget_bytes=*/512);
  std::string path = WritePlan(plan, "run_plan_failing.pbtxt");
  std::string trace = TempPath("run_plan_failing_trace.json");
  CommandResult result = RunCommand({path, "--trace", trace});
  EXPECT_EQ(result.exit_code, cli::kExitFailure) << result.out;
  EXPECT_THAT(result.error, HasSubstr("job 'scale_job' failed"));
  EXPECT_THAT(result.error, HasSubstr("sink 'sink'"));
  // The summary and the trace of what ran are still there.
  EXPECT_THAT(result.out, HasSubstr("makespan: "));
  EXPECT_TRUE(ParseJson(ReadFile(trace)).ok());

  result = RunCommand({path, "--output=json"});
  EXPECT_EQ(result.exit_code, cli::kExitFailure);
  absl::StatusOr<JsonValue> json = ParseJson(result.out);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->Find("status")->string, "failed");
  EXPECT_THAT(json->Find("error")->string, HasSubstr("sink 'sink'"));
}

TEST(RunPlanCommandTest, TraceWriteFailureExitsWithOne) {
  std::string plan = WritePlan(ScalePlan(2), "run_plan_bad_trace.pbtxt");
  std::string trace = TempPath("no/such/directory/trace.json");
  CommandResult result = RunCommand({plan, "--trace", trace});
  EXPECT_EQ(result.exit_code, cli::kExitFailure);
  EXPECT_THAT(result.error, HasSubstr(trace));
  EXPECT_THAT(result.out, Not(HasSubstr("trace: ")));
}

}  // namespace
}  // namespace loom::loomctl
