// `loomctl run`, run in-process on jobs written to temporary files.
#include "tools/loomctl/run_command.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/tensor_statistics.h"
#include "tests/tools/loomctl/command_test_util.h"
#include "tests/core/json_test_util.h"

namespace loom::loomctl {
namespace {

using ::loom::testing::JsonValue;
using ::loom::testing::ParseJson;
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

// A data-parallel layer: [8, 16] x [16, 4] on two devices, 3 steps, two fetches.
constexpr char kJob[] = R"pb(
  name: "layer"
  placement { devices: [ "cpu:0", "cpu:1" ] }
  num_steps: 3
  inputs {
    name: "x"
    shape: [ 8, 16 ]
    sbp: "S(0)"
    random_normal { std: 1 seed: 1 }
  }
  variables {
    name: "w"
    shape: [ 16, 4 ]
    sbp: "B"
    initializer { normal { std: 0.1 seed: 2 } }
  }
  ops {
    name: "y"
    type: "matmul"
    inputs: [ "x", "w" ]
    outputs: "y"
  }
  ops { name: "a" type: "relu" inputs: "y" outputs: "a" }
  fetch: [ "y", "a" ]
)pb";

HostTensor FloatTensor(Shape shape, const std::vector<float>& values) {
  HostTensor tensor;
  tensor.data_type = plan::FLOAT32;
  tensor.shape = std::move(shape);
  tensor.bytes.resize(values.size() * sizeof(float));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::vector<float> NpyFloats(const std::string& path) {
  std::string file = ReadFile(path);
  EXPECT_GE(file.size(), 10u) << path;
  if (file.size() < 10) return {};
  size_t offset =
      10 + (static_cast<unsigned char>(file[8]) | static_cast<unsigned char>(file[9]) << 8);
  std::vector<float> values((file.size() - offset) / sizeof(float));
  std::memcpy(values.data(), file.data() + offset, values.size() * sizeof(float));
  return values;
}

CommandResult RunCommand(const std::vector<std::string>& arguments) {
  return RunSubcommandCapturing(RunSubcommand(), arguments);
}

absl::StatusOr<RunOptions> ParseOptions(const std::vector<std::string>& arguments) {
  absl::StatusOr<cli::ParsedArguments> parsed = RunArgumentSpec().Parse(arguments);
  if (!parsed.ok()) return parsed.status();
  return RunOptionsFrom(*parsed);
}

TEST(RunOptionsTest, DefaultsAndEveryFlag) {
  absl::StatusOr<RunOptions> options = ParseOptions({"job.pbtxt", "--devices", "cpu:2"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->job_path, "job.pbtxt");
  EXPECT_EQ(options->devices.ToString(), "cpu:2");
  EXPECT_EQ(options->steps, 0);
  EXPECT_EQ(options->output, OutputFormat::kText);
  EXPECT_EQ(options->stall_timeout, absl::Seconds(10));
  EXPECT_EQ(options->blas_threads, 1);
  EXPECT_THAT(options->fetch_directory, IsEmpty());
  EXPECT_THAT(options->trace_path, IsEmpty());
  EXPECT_FALSE(options->actors);

  options = ParseOptions({"j", "--devices=cpu:4", "--steps", "7", "--fetch-dir", "out", "--trace",
                          "t.json", "--output=json", "--stall-timeout", "2s", "--blas-threads", "3",
                          "--actors", "--verbose"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->devices.ToString(), "cpu:4");
  EXPECT_EQ(options->steps, 7);
  EXPECT_EQ(options->fetch_directory, "out");
  EXPECT_EQ(options->trace_path, "t.json");
  EXPECT_EQ(options->output, OutputFormat::kJson);
  EXPECT_EQ(options->stall_timeout, absl::Seconds(2));
  EXPECT_EQ(options->blas_threads, 3);
  EXPECT_TRUE(options->actors);
  EXPECT_TRUE(options->verbose);
}

TEST(RunOptionsTest, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> arguments;
    std::string message;
  };
  for (const Case& test_case : std::vector<Case>{
           {{"j"}, "--devices is required"},
           {{"j", "--devices", "cuda:0,0"}, "--devices 'cuda:0,0': cuda:0 is named twice"},
           {{"j", "--devices", "cpu:2", "--steps", "0"}, "--steps must be a whole number >= 1"},
           {{"j", "--devices", "cpu:2", "--steps", "x"}, "--steps must be a whole number >= 1"},
           {{"j", "--devices", "cpu:2", "--output", "xml"}, "--output must be 'text' or 'json'"},
           {{"j", "--devices", "cpu:2", "--stall-timeout", "5"}, "is not a duration"},
           {{"j", "--devices", "cpu:2", "--blas-threads", "0"}, "--blas-threads must be"},
           {{"j", "--devices", "cpu:2", "--fetch-dir="}, "--fetch-dir needs a directory"},
           {{"j", "--devices", "cpu:2", "--trace="}, "--trace needs a file path"},
       }) {
    absl::StatusOr<RunOptions> options = ParseOptions(test_case.arguments);
    ASSERT_FALSE(options.ok()) << test_case.message;
    EXPECT_THAT(options.status().message(), HasSubstr(test_case.message));
  }
}

TEST(ComputeStatisticsTest, EveryDataType) {
  absl::StatusOr<TensorStatistics> statistics =
      ComputeStatistics(FloatTensor({2, 2}, {1, -4, 2, 5}));
  ASSERT_TRUE(statistics.ok()) << statistics.status();
  EXPECT_EQ(statistics->elements, 4);
  EXPECT_DOUBLE_EQ(statistics->mean, 1.0);
  EXPECT_DOUBLE_EQ(statistics->max_abs, 5.0);

  HostTensor integers;
  integers.data_type = plan::INT64;
  integers.shape = Shape({3});
  std::vector<int64_t> values = {-7, 1, 3};
  integers.bytes.resize(sizeof(int64_t) * 3);
  std::memcpy(integers.bytes.data(), values.data(), integers.bytes.size());
  statistics = ComputeStatistics(integers);
  ASSERT_TRUE(statistics.ok()) << statistics.status();
  EXPECT_DOUBLE_EQ(statistics->mean, -1.0);
  EXPECT_DOUBLE_EQ(statistics->max_abs, 7.0);

  // bfloat16 -1.5 is 0xBFC0, 2 is 0x4000.
  HostTensor bfloat16;
  bfloat16.data_type = plan::BFLOAT16;
  bfloat16.shape = Shape({2});
  std::vector<uint16_t> bits = {0xBFC0, 0x4000};
  bfloat16.bytes.resize(4);
  std::memcpy(bfloat16.bytes.data(), bits.data(), 4);
  statistics = ComputeStatistics(bfloat16);
  ASSERT_TRUE(statistics.ok()) << statistics.status();
  EXPECT_DOUBLE_EQ(statistics->mean, 0.25);
  EXPECT_DOUBLE_EQ(statistics->max_abs, 2.0);
}

TEST(ComputeStatisticsTest, NanEmptyAndMalformed) {
  absl::StatusOr<TensorStatistics> statistics =
      ComputeStatistics(FloatTensor({2}, {1, std::nanf("")}));
  ASSERT_TRUE(statistics.ok());
  EXPECT_TRUE(std::isnan(statistics->mean));
  EXPECT_TRUE(std::isnan(statistics->max_abs));

  statistics = ComputeStatistics(FloatTensor({0, 3}, {}));
  ASSERT_TRUE(statistics.ok());
  EXPECT_EQ(statistics->elements, 0);
  EXPECT_TRUE(std::isnan(statistics->mean));

  HostTensor wrong = FloatTensor({3}, {1, 2});
  EXPECT_EQ(ComputeStatistics(wrong).status().code(), absl::StatusCode::kInvalidArgument);
  wrong.data_type = plan::DATA_TYPE_UNSPECIFIED;
  EXPECT_FALSE(ComputeStatistics(wrong).ok());
}

TEST(FetchedTensorsTest, FilesTextAndJson) {
  FetchedTensors fetched;
  fetched["loss"] = {FloatTensor({}, {0.5f}), FloatTensor({}, {0.25f})};
  fetched["out/y"] = {FloatTensor({1, 2}, {1, -3}), FloatTensor({1, 2}, {2, 2})};
  std::string directory = TempPath("run_fetched_tensors");
  std::filesystem::remove_all(directory);
  absl::StatusOr<std::vector<std::string>> paths = WriteFetchedTensors(fetched, directory);
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(*paths, ElementsAre(directory + "/loss_step0.npy", directory + "/out_y_step0.npy",
                                  directory + "/loss_step1.npy", directory + "/out_y_step1.npy"));
  EXPECT_THAT(NpyFloats(directory + "/out_y_step0.npy"), ElementsAre(1.0f, -3.0f));
  EXPECT_THAT(ReadFile(directory + "/loss_step1.npy"), HasSubstr("'shape': ()"));

  absl::StatusOr<std::string> text = FormatStepsText(fetched);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "step  tensor  type     shape   mean  max |x|\n"
            "0     loss    float32  []       0.5      0.5\n"
            "0     out/y   float32  [1, 2]    -1        3\n"
            "1     loss    float32  []      0.25     0.25\n"
            "1     out/y   float32  [1, 2]     2        2\n");

  absl::StatusOr<std::string> json = FormatStepsJson(fetched, directory);
  ASSERT_TRUE(json.ok()) << json.status();
  std::vector<std::string> lines = absl::StrSplit(*json, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  absl::StatusOr<JsonValue> step = ParseJson(lines[1]);
  ASSERT_TRUE(step.ok()) << step.status() << "\n" << lines[1];
  EXPECT_EQ(step->Find("step")->number, 1);
  const JsonValue* y = step->Find("tensors")->Find("out/y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->Find("data_type")->string, "float32");
  EXPECT_EQ(y->Find("shape")->array.size(), 2u);
  EXPECT_EQ(y->Find("mean")->number, 2);
  EXPECT_EQ(y->Find("max_abs")->number, 2);
  EXPECT_EQ(y->Find("file")->string, directory + "/out_y_step1.npy");

  // Without a fetch directory there is no "file"; NaN is null.
  fetched["loss"][0] = FloatTensor({}, {std::nanf("")});
  json = FormatStepsJson(fetched, "");
  ASSERT_TRUE(json.ok()) << json.status();
  lines = absl::StrSplit(*json, '\n', absl::SkipEmpty());
  step = ParseJson(lines[0]);
  ASSERT_TRUE(step.ok()) << step.status() << "\n" << lines[0];
  EXPECT_EQ(step->Find("tensors")->Find("loss")->Find("mean")->type, JsonValue::Type::kNull);
  EXPECT_EQ(step->Find("tensors")->Find("loss")->Find("file"), nullptr);
}

TEST(FetchedTensorsTest, TwoTensorsOnOneFileAreRefused) {
  FetchedTensors fetched;
  fetched["a/b"] = {FloatTensor({1}, {1})};
  fetched["a_b"] = {FloatTensor({1}, {1})};
  absl::StatusOr<std::vector<std::string>> paths =
      WriteFetchedTensors(fetched, TempPath("run_fetched_clash"));
  ASSERT_FALSE(paths.ok());
  EXPECT_THAT(paths.status().message(), HasSubstr("'a/b' and 'a_b'"));
}

TEST(RunCommandTest, PrintsEveryStepAndTheFooter) {
  std::string job = WriteFile("run_text.pbtxt", kJob);
  CommandResult result = RunCommand({job, "--devices", "cpu:2"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.error, IsEmpty());
  EXPECT_THAT(result.out, HasSubstr("step  tensor  type     shape"));
  for (const char* row : {"0     a       float32  [8, 4]", "2     y       float32  [8, 4]"}) {
    EXPECT_THAT(result.out, HasSubstr(row));
  }
  EXPECT_THAT(result.out, HasSubstr("job 'layer': "));
  EXPECT_THAT(result.out, HasSubstr(" acts\nmakespan: "));
  EXPECT_THAT(result.out, HasSubstr("peak memory:\n  node0/cpu:0"));
  EXPECT_THAT(result.out, HasSubstr("  node0/cpu:1"));
  EXPECT_THAT(result.out, Not(HasSubstr("busy ms")));

  result = RunCommand({job, "--devices", "cpu:2", "--steps", "1", "--actors"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.out, HasSubstr("busy ms"));
  EXPECT_THAT(result.out, Not(HasSubstr("\n1     a")));
}

TEST(RunCommandTest, OneAndTwoDevicesFetchTheSameValues) {
  std::string job = WriteFile("run_equivalence.pbtxt", kJob);
  std::string one = TempPath("run_equivalence_one");
  std::string two = TempPath("run_equivalence_two");
  std::filesystem::remove_all(one);
  std::filesystem::remove_all(two);
  CommandResult result = RunCommand({job, "--devices", "cpu:1", "--fetch-dir", one});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  EXPECT_THAT(result.error, HasSubstr("note: the job's placement"));
  EXPECT_THAT(result.out, HasSubstr("fetched: 6 .npy files in " + one));
  result = RunCommand({job, "--devices", "cpu:2", "--fetch-dir", two});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  for (const char* name : {"y", "a"}) {
    for (int step = 0; step < 3; ++step) {
      std::string file = std::string(name) + "_step" + std::to_string(step) + ".npy";
      std::vector<float> expected = NpyFloats(one + "/" + file);
      std::vector<float> actual = NpyFloats(two + "/" + file);
      ASSERT_EQ(expected.size(), 32u) << file;
      ASSERT_EQ(actual.size(), expected.size()) << file;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(actual[i], expected[i], 1e-5) << file << " element " << i;
      }
    }
  }
}

TEST(RunCommandTest, JsonIsOneObjectPerLine) {
  std::string job = WriteFile("run_json.pbtxt", kJob);
  std::string trace = TempPath("run_json_trace.json");
  std::string fetch = TempPath("run_json_fetch");
  CommandResult result = RunCommand({job, "--devices", "cpu:2", "--output", "json", "--trace",
                                     trace, "--fetch-dir", fetch, "--steps", "2"});
  ASSERT_EQ(result.exit_code, cli::kExitSuccess) << result.error;
  std::vector<std::string> lines = absl::StrSplit(result.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << result.out;
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<JsonValue> json = ParseJson(lines[step]);
    ASSERT_TRUE(json.ok()) << json.status() << "\n" << lines[step];
    EXPECT_EQ(json->Find("step")->number, step);
    EXPECT_EQ(json->Find("tensors")->object.size(), 2u);
    EXPECT_EQ(json->Find("tensors")->Find("a")->Find("file")->string,
              fetch + "/a_step" + std::to_string(step) + ".npy");
  }
  absl::StatusOr<JsonValue> summary = ParseJson(lines[2]);
  ASSERT_TRUE(summary.ok()) << summary.status() << "\n" << lines[2];
  EXPECT_EQ(summary->Find("job_name")->string, "layer");
  EXPECT_EQ(summary->Find("status")->string, "ok");
  EXPECT_GT(summary->Find("acts")->number, 0);
  EXPECT_EQ(summary->Find("devices")->array.size(), 2u);
  EXPECT_EQ(summary->Find("trace")->string, trace);
  EXPECT_EQ(summary->Find("fetched_files")->array.size(), 4u);
  EXPECT_TRUE(ParseJson(ReadFile(trace)).ok());
}

TEST(RunCommandTest, CompileErrorsExitWithTwo) {
  std::string job =
      WriteFile("run_bad.pbtxt", absl::StrReplaceAll(kJob, {{"[ 16, 4 ]", "[ 9, 4 ]"}}));
  CommandResult result = RunCommand({job, "--devices", "cpu:2"});
  EXPECT_EQ(result.exit_code, cli::kExitUsage);
  EXPECT_THAT(result.error, HasSubstr("op 'y'"));
  EXPECT_THAT(result.out, IsEmpty());
}

TEST(RunCommandTest, FailedJobExitsWithOne) {
  // The registers fit the budget; the sink's copies of the fetched pieces do not.
  std::string job = WriteFile("run_failing.pbtxt", R"pb(
    name: "failing"
    device_memory_budget_bytes: 2048
    inputs {
      name: "x"
      shape: [ 8, 16 ]
      random_normal { std: 1 seed: 1 }
    }
    variables {
      name: "w"
      shape: [ 16, 4 ]
      initializer { constant: 1 }
    }
    ops {
      name: "y"
      type: "matmul"
      inputs: [ "x", "w" ]
      outputs: "y"
    }
    fetch: "y"
  )pb");
  CommandResult result = RunCommand({job, "--devices", "cpu:1", "--steps", "10"});
  EXPECT_EQ(result.exit_code, cli::kExitFailure) << result.out;
  EXPECT_THAT(result.error, HasSubstr("loomctl run: job 'failing' failed: RESOURCE_EXHAUSTED"));

  result = RunCommand({job, "--devices", "cpu:1", "--steps", "10", "--output", "json"});
  EXPECT_EQ(result.exit_code, cli::kExitFailure);
  absl::StatusOr<JsonValue> json = ParseJson(result.out);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << result.out;
  EXPECT_EQ(json->Find("status")->string, "failed");
  EXPECT_THAT(json->Find("error")->string, HasSubstr("memory budget"));
}

}  // namespace
}  // namespace loom::loomctl
