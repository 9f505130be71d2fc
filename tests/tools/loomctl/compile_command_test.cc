// `loomctl compile`, run in-process on jobs written to temporary files.
#include "tools/loomctl/compile_command.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "runtime/plan_text.h"
#include "tests/tools/loomctl/command_test_util.h"

namespace loom::loomctl {
namespace {

using ::testing::ElementsAre;
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

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

// examples/jobs/mlp_megatron.pbtxt: one all-reduce (P -> B) before z.
constexpr char kMegatronJob[] = R"pb(
  name: "megatron"
  placement { devices: [ "cpu:0", "cpu:1", "cpu:2", "cpu:3" ] }
  num_steps: 2
  inputs {
    name: "x"
    shape: [ 16, 64 ]
    sbp: "Replicate"
    random_normal { std: 1 seed: 1 }
  }
  variables {
    name: "w1"
    shape: [ 64, 256 ]
    sbp: "S(1)"
    initializer { normal { std: 0.05 seed: 2 } }
  }
  variables {
    name: "b1"
    shape: [ 256 ]
    sbp: "S(0)"
    initializer { constant: 0 }
  }
  variables {
    name: "w2"
    shape: [ 256, 64 ]
    sbp: "S(0)"
    initializer { normal { std: 0.05 seed: 3 } }
  }
  variables {
    name: "b2"
    shape: [ 64 ]
    sbp: "B"
    initializer { constant: 0 }
  }
  ops {
    name: "h"
    type: "matmul"
    inputs: [ "x", "w1" ]
    outputs: "h"
  }
  ops {
    name: "hb"
    type: "bias_add"
    inputs: [ "h", "b1" ]
    outputs: "hb"
  }
  ops { name: "g" type: "gelu" inputs: "hb" outputs: "g" }
  ops {
    name: "y"
    type: "matmul"
    inputs: [ "g", "w2" ]
    outputs: "y"
  }
  ops {
    name: "z"
    type: "bias_add"
    inputs: [ "y", "b2" ]
    outputs: "z"
    output_sbp { sbp: "B" }
  }
  fetch: "z"
)pb";

job::Job ParseJob(const std::string& text) {
  job::Job job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

CommandResult RunCommand(const std::vector<std::string>& arguments) {
  return RunSubcommandCapturing(CompileSubcommand(), arguments);
}

absl::StatusOr<CompileOptions> ParseOptions(const std::vector<std::string>& arguments) {
  absl::StatusOr<cli::ParsedArguments> parsed = CompileArgumentSpec().Parse(arguments);
  if (!parsed.ok()) return parsed.status();
  return CompileOptionsFrom(*parsed);
}

TEST(CompileOptionsTest, Defaults) {
  absl::StatusOr<CompileOptions> options = ParseOptions({"job.pbtxt", "--devices", "cpu:4"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->job_path, "job.pbtxt");
  EXPECT_EQ(options->devices.ToString(), "cpu:4");
  EXPECT_EQ(options->nodes, 1);
  EXPECT_THAT(options->plan_path, IsEmpty());
  EXPECT_THAT(options->node_plan_directory, IsEmpty());
  EXPECT_THAT(options->dot_path, IsEmpty());
  EXPECT_FALSE(options->explain);
  EXPECT_FALSE(options->list_ops);
}

TEST(CompileOptionsTest, EveryFlag) {
  absl::StatusOr<CompileOptions> options =
      ParseOptions({"j.pbtxt", "--devices=cpu:8", "--nodes", "2", "--out", "p.pb", "--node-plans",
                    "plans", "--dot", "p.dot", "--explain", "--verbose"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->devices.ToString(), "cpu:8");
  EXPECT_EQ(options->nodes, 2);
  EXPECT_EQ(options->plan_path, "p.pb");
  EXPECT_EQ(options->node_plan_directory, "plans");
  EXPECT_EQ(options->dot_path, "p.dot");
  EXPECT_TRUE(options->explain);
  EXPECT_TRUE(options->verbose);
}

TEST(CompileOptionsTest, ListOpsNeedsNoJob) {
  absl::StatusOr<CompileOptions> options = ParseOptions({"--list-ops"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->list_ops);
}

TEST(CompileOptionsTest, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> arguments;
    std::string message;
  };
  for (const Case& test_case : std::vector<Case>{
           {{"j"}, "--devices is required"},
           {{"--devices", "cpu:2"}, "missing JOB"},
           {{"j", "--devices", "cuda:x"}, "--devices 'cuda:x': 'x' is not a GPU index"},
           {{"j", "--devices", "cpu:0"}, "--devices 'cpu:0': cpu:N needs a whole number N >= 1"},
           {{"j", "--devices", "4"}, "--devices '4': unknown device type"},
           {{"j", "--devices", "cpu:x"}, "--devices 'cpu:x': cpu:N needs a whole number N >= 1"},
           {{"j", "--devices", "cpu:2", "--nodes", "0"}, "--nodes must be a whole number >= 1"},
           {{"j", "--devices", "cpu:2", "--nodes", "3"}, "every node needs a device"},
           {{"j", "--devices", "cpu:2", "--out="}, "--out needs a path"},
           {{"j", "--devices", "cpu:2", "--dot="}, "--dot needs a path"},
           {{"j", "--devices", "cpu:2", "--node-plans="}, "--node-plans needs a path"},
           {{"j", "--list-ops"}, "give it no JOB"},
       }) {
    absl::StatusOr<CompileOptions> options = ParseOptions(test_case.arguments);
    ASSERT_FALSE(options.ok()) << test_case.message;
    EXPECT_THAT(options.status().message(), HasSubstr(test_case.message));
  }
}

TEST(FitJobToDevicesTest, LeavesAJobThatFits) {
  job::Job job = ParseJob(kMegatronJob);
  EXPECT_EQ(compiler::FitJobToDevices(compiler::DeviceSet::Cpus(4, 1), &job), "");
  EXPECT_EQ(compiler::FitJobToDevices(compiler::DeviceSet::Cpus(8, 1), &job), "");
  EXPECT_EQ(job.placement().devices_size(), 4);
}

TEST(FitJobToDevicesTest, ReplacesAOneAxisPlacementThatDoesNotFit) {
  job::Job job = ParseJob(kMegatronJob);
  std::string note = compiler::FitJobToDevices(compiler::DeviceSet::Cpus(1, 1), &job);
  EXPECT_THAT(note, HasSubstr("[cpu:0, cpu:1, cpu:2, cpu:3] does not fit the 1 CPU on 1 node"));
  EXPECT_THAT(note, HasSubstr("placing the job on [cpu:0] instead"));
  EXPECT_THAT(job.placement().devices(), ElementsAre("cpu:0"));

  job = ParseJob(kMegatronJob);
  note = compiler::FitJobToDevices(compiler::DeviceSet::Cpus(4, 2), &job);
  EXPECT_THAT(note, HasSubstr("4 CPUs on 2 nodes"));
  EXPECT_THAT(job.placement().devices(),
              ElementsAre("cpu:0", "cpu:1", "node1/cpu:0", "node1/cpu:1"));
}

TEST(FitJobToDevicesTest, LeavesJobsThatPlaceMoreThanTheDefault) {
  compiler::DeviceSet one = compiler::DeviceSet::Cpus(1, 1);
  job::Job hierarchy = ParseJob(kMegatronJob);
  hierarchy.mutable_placement()->add_hierarchy(2);
  hierarchy.mutable_placement()->add_hierarchy(2);
  job::Job stages = ParseJob(kMegatronJob);
  stages.add_stage_placements()->add_devices("cpu:0");
  job::Job own_variable = ParseJob(kMegatronJob);
  own_variable.mutable_variables(0)->mutable_placement()->add_devices("cpu:0");
  job::Job own_op = ParseJob(kMegatronJob);
  own_op.mutable_ops(3)->mutable_placement()->add_devices("cpu:0");
  job::Job malformed = ParseJob(kMegatronJob);
  malformed.mutable_placement()->set_devices(0, "tpu:0");
  for (job::Job* job : {&hierarchy, &stages, &own_variable, &own_op, &malformed}) {
    job::Job before = *job;
    EXPECT_EQ(compiler::FitJobToDevices(one, job), "");
    EXPECT_EQ(job->placement().DebugString(), before.placement().DebugString());
  }
  // No placement at all: the compiler uses every device.
  job::Job none = ParseJob(kMegatronJob);
  none.clear_placement();
  EXPECT_EQ(compiler::FitJobToDevices(one, &none), "");
}

TEST(CompileCommandTest, SummaryCountsTasksByKind) {
  std::string job = WriteFile("compile_summary.pbtxt", kMegatronJob);
  CommandResult result = RunCommand({job, "--devices", "cpu:4"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.error, IsEmpty());
  // One paragraph, wrapped.
  EXPECT_THAT(result.out, Not(HasSubstr("\n\n")));
  std::string paragraph = absl::StrReplaceAll(result.out, {{"\n", " "}});
  EXPECT_THAT(paragraph, HasSubstr("job 'megatron' compiled for 4 CPUs on 1 node: 5 ops"));
  for (const char* part :
       {" compute, ", "4 source, ", "16 variable, ", "4 sink, ", "0 copy, ", "4 collective)",
        "1 communicator", "registers holding", "1 node plan."}) {
    EXPECT_THAT(paragraph, HasSubstr(part));
  }
  EXPECT_THAT(result.out, Not(HasSubstr("plan: ")));
}

TEST(CompileCommandTest, ExplainNamesTheAllReduce) {
  std::string job = WriteFile("compile_explain.pbtxt", kMegatronJob);
  CommandResult result = RunCommand({job, "--devices", "cpu:4", "--explain"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.out, HasSubstr("op h (matmul)"));
  EXPECT_THAT(result.out, HasSubstr("all-reduce(sum) P -> B"));
  EXPECT_THAT(result.out, HasSubstr("memory:"));
}

TEST(CompileCommandTest, RefitsTheJobWithANote) {
  std::string job = WriteFile("compile_refit.pbtxt", kMegatronJob);
  CommandResult result = RunCommand({job, "--devices", "cpu:1"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.error, HasSubstr("loomctl compile: note: the job's placement"));
  EXPECT_THAT(result.out, HasSubstr("compiled for 1 CPU on 1 node"));
}

TEST(CompileCommandTest, WritesThePlanNodePlansAndDot) {
  std::string job = WriteFile("compile_outputs.pbtxt", kMegatronJob);
  std::string plan_path = TempPath("compile_outputs_plan.pbtxt");
  std::string binary_path = TempPath("compile_outputs_plan.pb");
  std::string dot_path = TempPath("compile_outputs.dot");
  std::string node_plans = TempPath("compile_outputs_nodes");
  std::filesystem::remove_all(node_plans);
  CommandResult result = RunCommand({job, "--devices", "cpu:4", "--nodes", "2", "--out", plan_path,
                                     "--dot", dot_path, "--node-plans", node_plans});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  // With --out, no summary: what was written.
  EXPECT_THAT(result.out, Not(HasSubstr("compiled for")));
  EXPECT_THAT(result.out, HasSubstr("plan: " + plan_path));
  EXPECT_THAT(result.out, HasSubstr("node plans: 2 files in " + node_plans));
  EXPECT_THAT(result.out, HasSubstr("dot: " + dot_path));

  absl::StatusOr<plan::Plan> plan = ReadPlanFile(plan_path);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->job_name(), "megatron");
  EXPECT_EQ(plan->devices_size(), 4);
  EXPECT_THAT(ReadFile(plan_path), HasSubstr("job_name: \"megatron\""));
  int node_tasks = 0;
  for (int node = 0; node < 2; ++node) {
    absl::StatusOr<plan::Plan> node_plan =
        ReadPlanFile(node_plans + "/node" + std::to_string(node) + ".pbtxt");
    ASSERT_TRUE(node_plan.ok()) << node_plan.status();
    EXPECT_EQ(node_plan->node(), node);
    node_tasks += node_plan->tasks_size();
  }
  EXPECT_EQ(node_tasks, plan->tasks_size());
  EXPECT_THAT(ReadFile(dot_path), HasSubstr("digraph \"megatron\""));

  // A .pb name gets the binary format.
  result = RunCommand({job, "--devices", "cpu:4", "--out", binary_path});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  plan::Plan binary;
  ASSERT_TRUE(binary.ParseFromString(ReadFile(binary_path)));
  EXPECT_EQ(binary.job_name(), "megatron");
}

TEST(CompileCommandTest, UnwritableOutputExitsWithOne) {
  std::string job = WriteFile("compile_unwritable.pbtxt", kMegatronJob);
  std::string plan_path = TempPath("no/such/directory/plan.pbtxt");
  CommandResult result = RunCommand({job, "--devices", "cpu:2", "--out", plan_path});
  EXPECT_EQ(result.exit_code, cli::kExitFailure);
  EXPECT_THAT(result.error, HasSubstr(plan_path));
}

TEST(CompileCommandTest, CompileErrorsExitWithTwoAndNameTheOp) {
  job::Job job = ParseJob(kMegatronJob);
  job.mutable_variables(2)->set_shape(0, 128);  // w2 [128, 64] after g [16, 256]
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(job, &text));
  CommandResult result = RunCommand({WriteFile("compile_bad.pbtxt", text), "--devices", "cpu:4"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("op 'y'"));
  EXPECT_THAT(result.out, IsEmpty());

  // Over the memory budget.
  job = ParseJob(kMegatronJob);
  job.set_device_memory_budget_bytes(1024);
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(job, &text));
  result = RunCommand({WriteFile("compile_over_budget.pbtxt", text), "--devices", "cpu:4"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("budget"));

  // Unreadable.
  result = RunCommand({TempPath("no_such_job.pbtxt"), "--devices", "cpu:1"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("no_such_job.pbtxt"));
  result = RunCommand(
      {WriteFile("compile_garbage.pbtxt", "name: \"x\"\nopz {}\n"), "--devices", "cpu:1"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("line 2"));
}

TEST(CompileCommandTest, ListOps) {
  CommandResult result = RunCommand({"--list-ops"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.out, HasSubstr("\nmatmul\n"));
  EXPECT_THAT(result.out, HasSubstr("causal_attention\n"));
}

TEST(CompileCommandTest, HelpListsTheFlags) {
  CommandResult result = RunCommand({"--help"});
  EXPECT_EQ(result.exit_code, cli::kExitSuccess);
  for (const char* flag : {"--devices SPEC", "--nodes K", "--out PATH", "--node-plans DIR",
                           "--dot PATH", "--explain", "--list-ops"}) {
    EXPECT_THAT(result.out, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace loom::loomctl
