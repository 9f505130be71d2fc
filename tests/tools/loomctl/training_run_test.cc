// `loomctl run` on training jobs: per-step lines, checkpoints (--save-dir, --save-every) and
// starting from one (--init).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/core/json_test_util.h"
#include "tests/tools/loomctl/command_test_util.h"
#include "tools/loomctl/checkpoint_directory.h"
#include "tools/loomctl/run_command.h"
#include "tools/loomctl/step_reporter.h"

namespace loom::loomctl {
namespace {

using ::loom::testing::JsonValue;
using ::loom::testing::ParseJson;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::Pair;
using ::testing::SizeIs;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

// A fresh, empty directory under the test's temporary directory.
std::string FreshDirectory(const std::string& name) {
  std::string path = TempPath(name);
  std::filesystem::remove_all(path);
  return path;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

// examples/jobs/mlp_regression.pbtxt: an MLP regression trained with AdamW for 6 steps, data
// parallel over 2 devices, on a fresh random batch every step, so that resuming must also continue
// the data.
std::string TrainingJobPath() { return LOOM_SOURCE_DIR "/examples/jobs/mlp_regression.pbtxt"; }

// The training job's text, for variants of it.
std::string TrainingJobText() {
  std::ifstream file(TrainingJobPath());
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

CommandResult RunTraining(std::vector<std::string> arguments) {
  std::vector<std::string> all = {TrainingJobPath(), "--devices", "cpu:2"};
  all.insert(all.end(), arguments.begin(), arguments.end());
  return RunSubcommandCapturing(RunSubcommand(), all);
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The step objects of a --output json run, in order.
struct JsonStep {
  int64_t step = 0;
  double loss = 0;
  std::string loss_text;  // as printed: exact comparisons compare these
  double step_time_ms = 0;
  JsonValue::Type tokens_per_second_type = JsonValue::Type::kNull;
};

std::vector<JsonStep> JsonSteps(const std::string& out) {
  std::vector<JsonStep> steps;
  for (const std::string& line : Lines(out)) {
    absl::StatusOr<JsonValue> json = ParseJson(line);
    EXPECT_TRUE(json.ok()) << line << ": " << json.status();
    if (!json.ok() || json->Find("loss") == nullptr) continue;
    JsonStep step;
    step.step = static_cast<int64_t>(json->Find("step")->number);
    step.loss = json->Find("loss")->number;
    size_t begin = line.find("\"loss\":") + 7;
    step.loss_text = line.substr(begin, line.find(',', begin) - begin);
    const JsonValue* time = json->Find("step_time_ms");
    EXPECT_NE(time, nullptr) << line;
    if (time != nullptr) step.step_time_ms = time->number;
    const JsonValue* tokens = json->Find("tokens_per_second");
    EXPECT_NE(tokens, nullptr) << line;
    if (tokens != nullptr) step.tokens_per_second_type = tokens->type;
    steps.push_back(step);
  }
  return steps;
}

std::vector<std::string> LossTexts(const std::vector<JsonStep>& steps) {
  std::vector<std::string> losses;
  for (const JsonStep& step : steps) losses.push_back(step.loss_text);
  return losses;
}

TEST(StepLineTest, TextAndJson) {
  StepLine line;
  line.step = 3;
  line.last_step = 20;
  line.loss = 5.4321;
  line.step_time_ms = 85.2;
  line.tokens_per_second = 12020;
  EXPECT_EQ(FormatStepLineText(line), "step 3/20  loss 5.43210  time 85.2 ms  tokens/s 12020");
  EXPECT_EQ(FormatStepLineJson(line),
            "{\"step\":3,\"loss\":5.4321,\"scalars\":{},\"step_time_ms\":85.2,"
            "\"tokens_per_second\":12020.0}");
  line.tokens_per_second.reset();
  line.loss = NAN;
  EXPECT_EQ(FormatStepLineText(line), "step 3/20  loss nan  time 85.2 ms");
  EXPECT_EQ(FormatStepLineJson(line),
            "{\"step\":3,\"loss\":null,\"scalars\":{},\"step_time_ms\":85.2,"
            "\"tokens_per_second\":null}");
}

TEST(StepLineTest, ScalarFetchesFollowTheLoss) {
  StepLine line;
  line.step = 1;
  line.last_step = 2;
  line.loss = 0.5;
  line.scalars = {{"accuracy", 0.8125}, {"moe.dropped", 12}, {"say \"hi\"", NAN}};
  line.step_time_ms = 10;
  EXPECT_EQ(
      FormatStepLineText(line),
      "step 1/2  loss 0.50000  accuracy 0.8125  moe.dropped 12  say \"hi\" nan  time 10.0 ms");
  EXPECT_EQ(FormatStepLineJson(line),
            "{\"step\":1,\"loss\":0.5,\"scalars\":{\"accuracy\":0.8125,\"moe.dropped\":12.0,"
            "\"say \\\"hi\\\"\":null},\"step_time_ms\":10.0,\"tokens_per_second\":null}");
}

TEST(TokensPerStepTest, ModelInputsFromTokenFilesOnly) {
  job::Job job;
  ASSERT_TRUE(
      google::protobuf::TextFormat::ParseFromString(R"pb(
                                                      inputs {
                                                        name: "x"
                                                        shape: [ 16, 64 ]
                                                        token_file { path: "data" }
                                                      }
                                                      inputs {
                                                        name: "y"
                                                        shape: [ 16, 64 ]
                                                        token_file { path: "data" targets: true }
                                                      }
                                                      inputs {
                                                        name: "noise"
                                                        shape: [ 16, 8 ]
                                                        random_normal { std: 1 }
                                                      }
                                                    )pb",
                                                    &job));
  EXPECT_EQ(TokensPerStep(job), 16 * 64);
  job.mutable_inputs(0)->clear_token_file();
  EXPECT_EQ(TokensPerStep(job), std::nullopt);
}

TEST(TrainingRunOptionsTest, CheckpointFlags) {
  absl::StatusOr<cli::ParsedArguments> parsed =
      RunArgumentSpec().Parse({"job", "--devices", "cpu:1", "--init", "a.safetensors", "--save-dir",
                               "out", "--save-every", "5"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<RunOptions> options = RunOptionsFrom(*parsed);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->init_path, "a.safetensors");
  EXPECT_EQ(options->save_directory, "out");
  EXPECT_EQ(options->save_every, 5);

  parsed = RunArgumentSpec().Parse({"job", "--devices", "cpu:1", "--save-every", "5"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(RunOptionsFrom(*parsed).status().message(), HasSubstr("--save-every needs"));
  parsed = RunArgumentSpec().Parse(
      {"job", "--devices", "cpu:1", "--save-dir", "d", "--save-every", "-1"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(RunOptionsFrom(*parsed).status().message(), HasSubstr("--save-every must be"));
}

TEST(TrainingRunTest, JsonPrintsOneObjectPerStep) {
  CommandResult result = RunTraining({"--steps", "4", "--output", "json"});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  std::vector<JsonStep> steps = JsonSteps(result.out);
  ASSERT_EQ(steps.size(), 4u) << result.out;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(std::isfinite(steps[i].loss));
    EXPECT_GT(steps[i].loss, 0);
    EXPECT_GT(steps[i].step_time_ms, 0);
    EXPECT_EQ(steps[i].tokens_per_second_type, JsonValue::Type::kNull) << "no token file";
  }
  // The steps, then the summary.
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_EQ(lines.size(), 5u);
  absl::StatusOr<JsonValue> summary = ParseJson(lines.back());
  ASSERT_TRUE(summary.ok());
  EXPECT_NE(summary->Find("makespan_ms"), nullptr) << lines.back();
  EXPECT_THAT(result.error, IsEmpty());
}

TEST(TrainingRunTest, TextPrintsOneLinePerStep) {
  CommandResult result = RunTraining({"--steps", "3"});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_GE(lines.size(), 3u);
  for (int step = 1; step <= 3; ++step) {
    EXPECT_THAT(lines[step - 1], MatchesRegex(absl::StrCat("step ", step,
                                                           "/3  loss [0-9]+\\.[0-9]{5}  time "
                                                           "[0-9]+\\.[0-9] ms")));
  }
  EXPECT_THAT(result.out, HasSubstr("makespan"));
}

// The training job with one more fetch of one element (the mean of the prediction) and one of
// several (the prediction itself): the step lines carry the first, not the second.
std::string JobWithScalarFetch() {
  std::string text = TrainingJobText();
  absl::StrAppend(&text, R"pb(
    ops { name: "mean_y" type: "reduce_mean" inputs: "y" outputs: "mean_y" }
    fetch: [ "mean_y", "y" ]
  )pb");
  return WriteFile("scalar_fetch_job.pbtxt", text);
}

TEST(TrainingRunTest, EveryStepLineCarriesTheScalarFetches) {
  const std::string job = JobWithScalarFetch();
  const std::string directory = FreshDirectory("scalar_fetches");
  CommandResult result = RunSubcommandCapturing(
      RunSubcommand(),
      {job, "--devices", "cpu:2", "--steps", "3", "--output", "json", "--fetch-dir", directory});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_EQ(lines.size(), 4u) << result.out;  // 3 steps and the summary
  for (int step = 1; step <= 3; ++step) {
    absl::StatusOr<JsonValue> json = ParseJson(lines[step - 1]);
    ASSERT_TRUE(json.ok()) << lines[step - 1];
    const JsonValue* scalars = json->Find("scalars");
    ASSERT_NE(scalars, nullptr) << lines[step - 1];
    EXPECT_EQ(scalars->Find("y"), nullptr) << "not a scalar";
    const JsonValue* mean_y = scalars->Find("mean_y");
    ASSERT_NE(mean_y, nullptr) << lines[step - 1];
    // The value the fetch wrote for the step (one micro-batch per step).
    std::ifstream npy(absl::StrCat(directory, "/mean_y_step", step - 1, ".npy"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(npy)), std::istreambuf_iterator<char>());
    ASSERT_GE(bytes.size(), 14u);
    float fetched;
    std::memcpy(&fetched, bytes.data() + bytes.size() - sizeof(float), sizeof(float));
    EXPECT_FLOAT_EQ(static_cast<float>(mean_y->number), fetched) << "step " << step;
  }

  result = RunSubcommandCapturing(RunSubcommand(), {job, "--devices", "cpu:2", "--steps", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  lines = Lines(result.out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_THAT(lines[0], MatchesRegex("step 1/2  loss [0-9]+\\.[0-9]{5}  mean_y -?[0-9.e+-]+  "
                                     "time [0-9]+\\.[0-9] ms"));
}

// The bytes of a file ("" when it cannot be read).
std::string FileBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

std::string StepFile(const std::string& directory, const std::string& tensor, int step) {
  return absl::StrCat(directory, "/", tensor, "_step", step, ".npy");
}

TEST(TrainingRunTest, FetchesAreWrittenAsTheyComeAndKeptNowhere) {
  // The training job with a device budget of 32 KiB and fetches of x ([8, 4]) and y ([8, 2]),
  // split over the two devices: 96 bytes per device per step, so 400 steps' pieces (37.5 KiB)
  // would not fit. Neither printing the steps nor writing the fetched tensors keeps them.
  std::string text = TrainingJobText();
  absl::StrAppend(&text, "fetch: [ \"x\", \"y\" ]\ndevice_memory_budget_bytes: 32768\n");
  const std::string job = WriteFile("budgeted_fetch_job.pbtxt", text);
  CommandResult result =
      RunSubcommandCapturing(RunSubcommand(), {job, "--devices", "cpu:2", "--steps", "400"});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  EXPECT_THAT(result.out, HasSubstr("step 400/400"));

  const std::string directory = FreshDirectory("written_as_they_come");
  result = RunSubcommandCapturing(
      RunSubcommand(), {job, "--devices", "cpu:2", "--steps", "400", "--fetch-dir", directory});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  // x, y and the loss, which a training run fetches too.
  EXPECT_THAT(result.out, HasSubstr(absl::StrCat("fetched: 1200 .npy files in ", directory)));
  EXPECT_TRUE(std::filesystem::exists(StepFile(directory, "x", 399)));
  EXPECT_TRUE(std::filesystem::exists(StepFile(directory, "y", 399)));

  // The same job without its loss and optimizer (not training) writes its fetches at the end,
  // from what its sinks kept: the same inputs x, and the same y until the first update.
  std::string untrained;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "loss:") && !absl::StartsWith(line, "optimizer")) {
      absl::StrAppend(&untrained, line, "\n");
    }
  }
  const std::string reference = FreshDirectory("written_at_the_end");
  result = RunSubcommandCapturing(
      RunSubcommand(), {WriteFile("untrained_fetch_job.pbtxt", untrained), "--devices", "cpu:2",
                        "--steps", "3", "--fetch-dir", reference});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  ASSERT_THAT(result.out, Not(HasSubstr("loss"))) << "still training";
  for (int step = 0; step < 3; ++step) {
    const std::string expected = FileBytes(StepFile(reference, "x", step));
    ASSERT_FALSE(expected.empty()) << StepFile(reference, "x", step);
    EXPECT_EQ(FileBytes(StepFile(directory, "x", step)), expected) << "step " << step;
  }
  EXPECT_EQ(FileBytes(StepFile(directory, "y", 0)), FileBytes(StepFile(reference, "y", 0)));
  EXPECT_NE(FileBytes(StepFile(directory, "y", 2)), FileBytes(StepFile(reference, "y", 2)));
}

TEST(TrainingRunTest, FetchFilesCountOnAcrossSavedSegments) {
  std::string text = TrainingJobText();
  absl::StrAppend(&text, "fetch: \"y\"\n");
  const std::string job = WriteFile("fetching_job.pbtxt", text);
  const std::string whole = FreshDirectory("fetched_whole");
  CommandResult result =
      RunSubcommandCapturing(RunSubcommand(), {job, "--devices", "cpu:2", "--fetch-dir", whole});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  const std::string segmented = FreshDirectory("fetched_in_segments");
  result = RunSubcommandCapturing(
      RunSubcommand(), {job, "--devices", "cpu:2", "--fetch-dir", segmented, "--save-dir",
                        FreshDirectory("fetched_in_segments_checkpoints"), "--save-every", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.error;
  // Three segments of 2 steps, numbered on: the files of one uninterrupted run, byte for byte.
  for (int step = 0; step < 6; ++step) {
    const std::string expected = FileBytes(StepFile(whole, "y", step));
    ASSERT_FALSE(expected.empty()) << StepFile(whole, "y", step);
    EXPECT_EQ(FileBytes(StepFile(segmented, "y", step)), expected) << "step " << step;
  }
  EXPECT_FALSE(std::filesystem::exists(StepFile(segmented, "y", 6)));
}

TEST(TrainingRunTest, SavingEveryKStepsChangesNoLoss) {
  CommandResult plain = RunTraining({"--output", "json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.error;
  std::vector<JsonStep> expected = JsonSteps(plain.out);
  ASSERT_EQ(expected.size(), 6u);

  const std::string directory = FreshDirectory("save_every_2");
  CommandResult saved =
      RunTraining({"--output", "json", "--save-dir", directory, "--save-every", "2"});
  ASSERT_EQ(saved.exit_code, 0) << saved.error;
  std::vector<JsonStep> actual = JsonSteps(saved.out);
  ASSERT_EQ(actual.size(), 6u) << saved.out;
  EXPECT_EQ(LossTexts(actual), LossTexts(expected));
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_EQ(actual[i].step, expected[i].step);

  for (int step : {2, 4, 6}) {
    std::string path = CheckpointPath(directory, step);
    absl::StatusOr<checkpoint::Checkpoint> written = checkpoint::ReadSafetensors(path);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->metadata.at("step"), absl::StrCat(step));
    std::vector<std::string> names;
    for (const auto& [name, tensor] : written->tensors) names.push_back(name);
    EXPECT_THAT(names, ElementsAre("optimizer.exp_avg.w1", "optimizer.exp_avg.w2",
                                   "optimizer.exp_avg_sq.w1", "optimizer.exp_avg_sq.w2",
                                   "optimizer.step", "w1", "w2"));
    EXPECT_EQ(written->tensors.at("optimizer.step").Values<int64_t>()[0], step);
    EXPECT_EQ(written->tensors.at("w1").shape, Shape({4, 16}));
  }
  EXPECT_EQ(std::filesystem::read_symlink(std::filesystem::path(directory) / kLatestCheckpoint),
            "step-6.safetensors");
  EXPECT_THAT(saved.out, HasSubstr(absl::StrCat("{\"checkpoint\":\"", CheckpointPath(directory, 4),
                                                "\",\"step\":4}")));
}

TEST(TrainingRunTest, StartingFromAMidCheckpointContinuesExactly) {
  CommandResult plain = RunTraining({"--output", "json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.error;
  std::vector<JsonStep> expected = JsonSteps(plain.out);
  ASSERT_EQ(expected.size(), 6u);

  // Only a final checkpoint, after 3 steps.
  const std::string first = FreshDirectory("first_three");
  CommandResult head = RunTraining({"--output", "json", "--steps", "3", "--save-dir", first});
  ASSERT_EQ(head.exit_code, 0) << head.error;
  EXPECT_TRUE(std::filesystem::exists(CheckpointPath(first, 3)));

  const std::string second = FreshDirectory("last_three");
  CommandResult tail = RunTraining({"--output", "json", "--steps", "3", "--init",
                                    CheckpointPath(first, 3), "--save-dir", second});
  ASSERT_EQ(tail.exit_code, 0) << tail.error;
  std::vector<JsonStep> resumed = JsonSteps(tail.out);
  ASSERT_EQ(resumed.size(), 3u) << tail.out;
  EXPECT_EQ(resumed[0].step, 4);
  EXPECT_EQ(resumed[2].step, 6);
  EXPECT_EQ(LossTexts(resumed),
            (std::vector<std::string>{expected[3].loss_text, expected[4].loss_text,
                                      expected[5].loss_text}));
  // The resumed run numbers its checkpoints from the start of training.
  EXPECT_TRUE(std::filesystem::exists(CheckpointPath(second, 6)));

  // Text output numbers the steps the same way.
  CommandResult text = RunTraining({"--steps", "1", "--init", CheckpointPath(first, 3)});
  ASSERT_EQ(text.exit_code, 0) << text.error;
  EXPECT_THAT(text.out, ContainsRegex("^step 4/4  loss "));
}

// ZeRO as SBP: a checkpoint holds logical tensors, so a run saved with its variables replicated
// resumes with them split over the data-parallel ranks (zero_stage 3), one saved under stage 3
// resumes under stage 2 and one saved under stage 2 replicated, each continuing the straight
// run's losses exactly (two ranks: the reduce-scatter sums as the all-reduce does).
TEST(TrainingRunTest, ACheckpointResumesUnderAnotherZeroStage) {
  CommandResult plain = RunTraining({"--output", "json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.error;
  std::vector<JsonStep> expected = JsonSteps(plain.out);
  ASSERT_EQ(expected.size(), 6u);
  const std::vector<std::string> jobs = {
      TrainingJobPath(),
      WriteFile("zero_stage_2_job.pbtxt", absl::StrCat(TrainingJobText(), "zero_stage: 2\n")),
      WriteFile("zero_stage_3_job.pbtxt", absl::StrCat(TrainingJobText(), "zero_stage: 3\n"))};
  const int stages[] = {0, 2, 3};
  for (const auto& [saved, resumed_under] : {std::pair{0, 2}, std::pair{2, 1}, std::pair{1, 0}}) {
    const std::string what =
        absl::StrCat("zero_stage ", stages[saved], " -> zero_stage ", stages[resumed_under]);
    const std::string directory = FreshDirectory(absl::StrCat("zero_resume_", saved));
    CommandResult head = RunSubcommandCapturing(
        RunSubcommand(), {jobs[saved], "--devices", "cpu:2", "--output", "json", "--steps", "3",
                          "--save-dir", directory});
    ASSERT_EQ(head.exit_code, 0) << what << ": " << head.error;
    CommandResult tail = RunSubcommandCapturing(
        RunSubcommand(), {jobs[resumed_under], "--devices", "cpu:2", "--output", "json", "--steps",
                          "3", "--init", CheckpointPath(directory, 3)});
    ASSERT_EQ(tail.exit_code, 0) << what << ": " << tail.error;
    std::vector<JsonStep> resumed = JsonSteps(tail.out);
    ASSERT_EQ(resumed.size(), 3u) << tail.out;
    EXPECT_EQ(LossTexts(resumed),
              (std::vector<std::string>{expected[3].loss_text, expected[4].loss_text,
                                        expected[5].loss_text}))
        << what;
  }
}

TEST(TrainingRunTest, ParametersWithoutOptimizerStateStartAFreshOptimizer) {
  // Only the parameters: the first step of the run sees them (same loss as the checkpoint's run
  // would compute for step 1, since the data also starts at step 0).
  const std::string directory = FreshDirectory("parameters_only");
  CommandResult head = RunTraining({"--output", "json", "--steps", "1", "--save-dir", directory});
  ASSERT_EQ(head.exit_code, 0) << head.error;
  absl::StatusOr<checkpoint::Checkpoint> saved =
      checkpoint::ReadSafetensors(CheckpointPath(directory, 1));
  ASSERT_TRUE(saved.ok()) << saved.status();
  checkpoint::Checkpoint parameters;
  parameters.tensors["w1"] = saved->tensors.at("w1");
  parameters.tensors["w2"] = saved->tensors.at("w2");
  std::string path = TempPath("parameters_only.safetensors");
  ASSERT_TRUE(checkpoint::WriteSafetensors(path, parameters).ok());
  CommandResult run = RunTraining({"--output", "json", "--steps", "1", "--init", path});
  ASSERT_EQ(run.exit_code, 0) << run.error;
  std::vector<JsonStep> steps = JsonSteps(run.out);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 1) << "a fresh optimizer starts at step 0";
}

// A checkpoint of the training job's variables, with `change` applied.
// Per step (args.step), the acts of a Chrome trace file, and whether their times increase with
// the steps (every act of a step starts after every act of the step before it began).
struct TracedSteps {
  std::map<int64_t, int> acts;
  bool ordered = true;
};

TracedSteps ReadTracedSteps(const std::string& path) {
  TracedSteps traced;
  std::ifstream file(path);
  absl::StatusOr<JsonValue> trace =
      ParseJson(std::string((std::istreambuf_iterator<char>(file)), {}));
  EXPECT_TRUE(trace.ok()) << path << ": " << trace.status();
  if (!trace.ok()) return traced;
  std::map<int64_t, std::pair<double, double>> first_and_last_start;
  for (const JsonValue& event : trace->Find("traceEvents")->array) {
    if (event.Find("ph")->string != "X") continue;
    const int64_t step = static_cast<int64_t>(event.Find("args")->Find("step")->number);
    ++traced.acts[step];
    const double start = event.Find("ts")->number;
    auto [range, added] = first_and_last_start.try_emplace(step, start, start);
    range->second.first = std::min(range->second.first, start);
    range->second.second = std::max(range->second.second, start);
  }
  for (auto it = first_and_last_start.begin(); it != first_and_last_start.end(); ++it) {
    auto next = std::next(it);
    if (next != first_and_last_start.end() && next->second.second < it->second.first) {
      traced.ordered = false;
    }
  }
  return traced;
}

TEST(TrainingRunTest, TraceStepsRecordThoseStepsAcrossSavedSegments) {
  const std::string trace = TempPath("trace_steps.json");
  // Steps 3 and 4 lie in the second and third segments of two steps.
  CommandResult run = RunTraining({"--save-dir", FreshDirectory("trace_steps_checkpoints"),
                                   "--save-every", "2", "--trace", trace, "--trace-steps", "3-4"});
  ASSERT_EQ(run.exit_code, 0) << run.error;
  TracedSteps windowed = ReadTracedSteps(trace);
  EXPECT_THAT(windowed.acts, SizeIs(2));
  EXPECT_GT(windowed.acts[3], 0);
  EXPECT_GT(windowed.acts[4], 0);
  EXPECT_TRUE(windowed.ordered);

  // Without a window: every step of every segment (and as many acts for steps 3 and 4).
  run = RunTraining({"--save-dir", FreshDirectory("trace_all_checkpoints"), "--save-every", "2",
                     "--trace", trace});
  ASSERT_EQ(run.exit_code, 0) << run.error;
  TracedSteps every = ReadTracedSteps(trace);
  EXPECT_THAT(every.acts, SizeIs(6));
  EXPECT_EQ(every.acts[3], windowed.acts[3]);
  EXPECT_EQ(every.acts[4], windowed.acts[4]);
  EXPECT_TRUE(every.ordered);

  // After --init, steps count on from the checkpoint's, as the step lines do.
  const std::string first = FreshDirectory("trace_first_three");
  ASSERT_EQ(RunTraining({"--steps", "3", "--save-dir", first}).exit_code, 0);
  run = RunTraining(
      {"--steps", "3", "--init", CheckpointPath(first, 3), "--trace", trace, "--trace-steps", "5"});
  ASSERT_EQ(run.exit_code, 0) << run.error;
  EXPECT_THAT(ReadTracedSteps(trace).acts, ElementsAre(Pair(5, Gt(0))));
  run = RunTraining(
      {"--steps", "3", "--init", CheckpointPath(first, 3), "--trace", trace, "--trace-steps", "3"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.error, HasSubstr("--trace-steps 3-3 is not within the run's steps 4-6"));
}

TEST(TrainingRunOptionsTest, TraceStepsNeedTraceAndARange) {
  absl::StatusOr<cli::ParsedArguments> parsed =
      RunArgumentSpec().Parse({"job", "--devices", "cpu:1", "--trace-steps", "2"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(RunOptionsFrom(*parsed).status().message(), HasSubstr("--trace-steps needs --trace"));
  parsed = RunArgumentSpec().Parse(
      {"job", "--devices", "cpu:1", "--trace", "t.json", "--trace-steps", "4-2"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_THAT(RunOptionsFrom(*parsed).status().message(), HasSubstr("--trace-steps: '4-2'"));
  parsed = RunArgumentSpec().Parse(
      {"job", "--devices", "cpu:1", "--trace", "t.json", "--trace-steps", "2-4"});
  ASSERT_TRUE(parsed.ok());
  absl::StatusOr<RunOptions> options = RunOptionsFrom(*parsed);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_TRUE(options->trace_steps.has_value());
  EXPECT_EQ(options->trace_steps->first(), 2);
  EXPECT_EQ(options->trace_steps->last(), 4);
}

std::string WriteBadCheckpoint(const std::string& name,
                               const std::function<void(checkpoint::Checkpoint*)>& change) {
  auto zeros = [](Shape shape) {
    HostTensor tensor;
    tensor.data_type = plan::FLOAT32;
    tensor.shape = shape;
    tensor.bytes.assign(shape.NumElements() * sizeof(float), std::byte{0});
    return tensor;
  };
  checkpoint::Checkpoint checkpoint;
  checkpoint.tensors["w1"] = zeros({4, 16});
  checkpoint.tensors["w2"] = zeros({16, 2});
  change(&checkpoint);
  std::string path = TempPath(name);
  absl::Status status = checkpoint::WriteSafetensors(path, checkpoint);
  EXPECT_TRUE(status.ok()) << status;
  return path;
}

TEST(TrainingRunTest, BadInitFilesNameTheFileAndTheTensor) {
  std::string missing = WriteBadCheckpoint(
      "missing_variable.safetensors", [](checkpoint::Checkpoint* c) { c->tensors.erase("w2"); });
  CommandResult result = RunTraining({"--init", missing});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr(missing));
  EXPECT_THAT(result.error, HasSubstr("variable 'w2' is missing"));
  EXPECT_THAT(result.out, IsEmpty());

  std::string wrong_shape =
      WriteBadCheckpoint("wrong_shape.safetensors", [](checkpoint::Checkpoint* c) {
        c->tensors["w1"].shape = Shape({16, 4});
      });
  result = RunTraining({"--init", wrong_shape});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr(wrong_shape));
  EXPECT_THAT(result.error, HasSubstr("variable 'w1' is float32[16, 4] but the job's is "
                                      "float32[4, 16]"));

  // AdamW needs both moments of every variable; this file has one.
  std::string partial =
      WriteBadCheckpoint("partial_state.safetensors", [](checkpoint::Checkpoint* c) {
        c->tensors["optimizer.exp_avg.w1"] = c->tensors["w1"];
        c->tensors["optimizer.exp_avg_sq.w1"] = c->tensors["w1"];
        c->tensors["optimizer.exp_avg.w2"] = c->tensors["w2"];
        HostTensor step;
        step.data_type = plan::INT64;
        step.bytes.assign(sizeof(int64_t), std::byte{0});
        c->tensors["optimizer.step"] = step;
      });
  result = RunTraining({"--init", partial});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr(partial));
  EXPECT_THAT(result.error, HasSubstr("optimizer.exp_avg_sq.w2 is missing"));

  std::string no_step = WriteBadCheckpoint("no_step.safetensors", [](checkpoint::Checkpoint* c) {
    c->tensors["optimizer.exp_avg.w1"] = c->tensors["w1"];
  });
  result = RunTraining({"--init", no_step});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr("no 'optimizer.step'"));

  // The step counter is read from the file only when its header entry says it is one integer.
  auto with_step = [](HostTensor step) {
    return [step](checkpoint::Checkpoint* c) {
      c->tensors["optimizer.exp_avg.w1"] = c->tensors["w1"];
      c->tensors["optimizer.step"] = step;
    };
  };
  HostTensor float_step;
  float_step.data_type = plan::FLOAT32;
  float_step.shape = Shape({2});
  float_step.bytes.assign(2 * sizeof(float), std::byte{0});
  std::string bad_step = WriteBadCheckpoint("float_step.safetensors", with_step(float_step));
  result = RunTraining({"--init", bad_step});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr("'optimizer.step' must be one integer (I64, shape []), not "
                                      "float32[2]"));
  HostTensor negative_step;
  negative_step.data_type = plan::INT32;
  const int32_t minus_three = -3;
  negative_step.bytes.resize(sizeof(minus_three));
  std::memcpy(negative_step.bytes.data(), &minus_three, sizeof(minus_three));
  std::string negative = WriteBadCheckpoint("negative_step.safetensors", with_step(negative_step));
  result = RunTraining({"--init", negative});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr("'optimizer.step' is -3"));

  result = RunTraining({"--init", TempPath("no-such-file.safetensors")});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr("no-such-file.safetensors"));

  std::string not_safetensors = WriteFile("not_safetensors.safetensors", "hello");
  result = RunTraining({"--init", not_safetensors});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.error, HasSubstr(not_safetensors));
}

}  // namespace
}  // namespace loom::loomctl
