// Chrome traces of finished jobs: valid JSON, one complete event per act on the right lane.
#include "runtime/chrome_trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/json_test_util.h"
#include "tests/runtime/collective_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Writes the trace of `job` to a file, reads it back and parses it.
JsonValue WriteAndParse(const JobRuntime& job, const std::string& file_name) {
  std::string path = ::testing::TempDir() + "/" + file_name;
  absl::Status status = WriteChromeTrace(job, path);
  EXPECT_TRUE(status.ok()) << status;
  std::string text = ReadFile(path);
  EXPECT_EQ(text, ChromeTraceJson(job));
  EXPECT_EQ(CountOccurrences(text, "\"ph\":\"X\""), job.events().size());
  absl::StatusOr<JsonValue> json = ParseJson(text);
  EXPECT_TRUE(json.ok()) << json.status() << "\n" << text;
  return json.ok() ? *json : JsonValue();
}

std::vector<const JsonValue*> EventsWithPhase(const JsonValue& trace, const std::string& phase) {
  std::vector<const JsonValue*> events;
  const JsonValue* list = trace.Find("traceEvents");
  EXPECT_NE(list, nullptr);
  if (list == nullptr) return events;
  EXPECT_EQ(list->type, JsonValue::Type::kArray);
  for (const JsonValue& event : list->array) {
    const JsonValue* ph = event.Find("ph");
    EXPECT_NE(ph, nullptr);
    if (ph != nullptr && ph->string == phase) events.push_back(&event);
  }
  return events;
}

// Metadata events of `kind` ("process_name", "thread_name"): (pid, tid) -> args.name.
std::map<std::pair<int, int>, std::string> Names(const JsonValue& trace, const std::string& kind) {
  std::map<std::pair<int, int>, std::string> names;
  for (const JsonValue* event : EventsWithPhase(trace, "M")) {
    if (event->Find("name")->string != kind) continue;
    names[{static_cast<int>(event->Find("pid")->number),
           static_cast<int>(event->Find("tid")->number)}] =
        event->Find("args")->Find("name")->string;
  }
  return names;
}

// (pid, tid): where a trace draws an event.
using Lane = std::pair<int, int>;

// For each task name: its lanes, the pieces of its complete events and their kinds.
struct TaskEvents {
  std::set<Lane> lanes;
  std::vector<int64_t> pieces;
  std::set<std::string> kinds;
};

std::map<std::string, TaskEvents> CompleteEventsByTask(const JsonValue& trace) {
  std::map<std::string, TaskEvents> tasks;
  for (const JsonValue* event : EventsWithPhase(trace, "X")) {
    TaskEvents& task = tasks[event->Find("name")->string];
    task.lanes.insert({static_cast<int>(event->Find("pid")->number),
                       static_cast<int>(event->Find("tid")->number)});
    const JsonValue* args = event->Find("args");
    EXPECT_NE(args, nullptr);
    task.pieces.push_back(static_cast<int64_t>(args->Find("piece")->number));
    task.kinds.insert(args->Find("kind")->string);
    EXPECT_EQ(event->Find("ts")->type, JsonValue::Type::kNumber);
    EXPECT_GE(event->Find("ts")->number, 0.0);
    EXPECT_GE(event->Find("dur")->number, 0.0);
  }
  return tasks;
}

std::vector<int64_t> Range(int64_t count) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(i);
  return values;
}

TEST(ChromeTraceTest, OneCompleteEventPerActOnItsDeviceAndStream) {
  const int pieces = 12;
  PlanBuilder builder("trace_chain");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(pieces);
  builder.AddTask("plus", plan::COMPUTE, 1, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  ASSERT_EQ((*job)->events().size(), 3u * pieces);

  JsonValue trace = WriteAndParse(**job, "chrome_trace_chain.json");
  ASSERT_EQ(trace.type, JsonValue::Type::kObject);
  EXPECT_EQ(EventsWithPhase(trace, "X").size(), 3u * pieces);

  auto processes = Names(trace, "process_name");
  EXPECT_EQ(processes.size(), 2u);
  EXPECT_EQ((processes[{1, 0}]), "node0/cpu:0");
  EXPECT_EQ((processes[{2, 0}]), "node0/cpu:1");
  auto threads = Names(trace, "thread_name");
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_EQ((threads[{1, 1}]), "compute");
  EXPECT_EQ((threads[{2, 1}]), "compute");

  auto tasks = CompleteEventsByTask(trace);
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks["source"].lanes, (std::set<Lane>{Lane{1, 1}}));
  EXPECT_EQ(tasks["plus"].lanes, (std::set<Lane>{Lane{2, 1}}));
  EXPECT_EQ(tasks["sink"].lanes, (std::set<Lane>{Lane{2, 1}}));
  EXPECT_EQ(tasks["source"].kinds, std::set<std::string>{"source"});
  EXPECT_EQ(tasks["plus"].kinds, std::set<std::string>{"compute"});
  EXPECT_EQ(tasks["sink"].kinds, std::set<std::string>{"sink"});
  for (auto& [name, task] : tasks) {
    EXPECT_EQ(task.lanes.size(), 1u) << name;
    std::sort(task.pieces.begin(), task.pieces.end());
    EXPECT_EQ(task.pieces, Range(pieces)) << name;
  }
}

// A collective's acts say which collective they are (scripts/trace_overlap.py counts the token
// exchanges, all-to-alls, by it); other acts have no such argument.
TEST(ChromeTraceTest, ACollectivesActsNameItsKind) {
  auto job = MakeCollectiveJob(TwoCollectivesPlan(2));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  JsonValue trace = WriteAndParse(**job, "chrome_trace_collectives.json");
  int collectives = 0;
  for (const JsonValue* event : EventsWithPhase(trace, "X")) {
    const JsonValue* args = event->Find("args");
    ASSERT_NE(args, nullptr);
    const JsonValue* collective = args->Find("collective");
    if (args->Find("kind")->string != "collective") {
      EXPECT_EQ(collective, nullptr) << event->Find("name")->string;
      continue;
    }
    ASSERT_NE(collective, nullptr) << event->Find("name")->string;
    EXPECT_EQ(collective->string, "all_reduce");
    ++collectives;
  }
  EXPECT_EQ(collectives, 8);  // two collectives, two ranks, two pieces
}

TEST(ChromeTraceTest, TimesAreMicrosecondsOfTheEventRecord) {
  PlanBuilder builder("trace_times");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(3);
  builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  JsonValue trace = WriteAndParse(**job, "chrome_trace_times.json");
  std::vector<const JsonValue*> complete = EventsWithPhase(trace, "X");
  ASSERT_EQ(complete.size(), (*job)->events().size());
  // Complete events follow the event record's order.
  for (size_t i = 0; i < complete.size(); ++i) {
    const ActEvent& event = (*job)->events()[i];
    EXPECT_NEAR(complete[i]->Find("ts")->number, event.start_nanoseconds / 1000.0, 0.001);
    EXPECT_NEAR(complete[i]->Find("dur")->number,
                (event.end_nanoseconds - event.start_nanoseconds) / 1000.0, 0.001);
  }
}

TEST(ChromeTraceTest, ExplicitTaskIndicesNameTheRightTasks) {
  PlanBuilder builder("trace_indices");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(5);
  builder.AddTask("plus", plan::COMPUTE, 0, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  // Indices unrelated to positions, as per-node plans of a larger job have them.
  builder.mutable_plan().mutable_tasks(0)->set_index(40);
  builder.mutable_plan().mutable_tasks(1)->set_index(7);
  builder.mutable_plan().mutable_tasks(2)->set_index(0);
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  auto tasks = CompleteEventsByTask(WriteAndParse(**job, "chrome_trace_indices.json"));
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks["source"].kinds, std::set<std::string>{"source"});
  EXPECT_EQ(tasks["plus"].kinds, std::set<std::string>{"compute"});
  EXPECT_EQ(tasks["sink"].kinds, std::set<std::string>{"sink"});
  for (auto& [name, task] : tasks) EXPECT_EQ(task.pieces.size(), 5u) << name;
}

TEST(ChromeTraceTest, StreamsOfOneDeviceAreThreadsOfOneProcess) {
  PlanBuilder builder("trace_streams");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(4);
  builder.AddTask("plus", plan::COMPUTE, 0, {"x"}, {"y"}, "test_sum_plus_one")
      .mutable_stream()
      ->set_kind(plan::STREAM_COPY_OUT);
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  JsonValue trace = WriteAndParse(**job, "chrome_trace_streams.json");
  auto threads = Names(trace, "thread_name");
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ((threads[{1, 1}]), "compute");
  EXPECT_EQ((threads[{1, 2}]), "copy_out");
  auto tasks = CompleteEventsByTask(trace);
  EXPECT_EQ(tasks["source"].lanes, (std::set<Lane>{Lane{1, 1}}));
  EXPECT_EQ(tasks["plus"].lanes, (std::set<Lane>{Lane{1, 2}}));
}

TEST(ChromeTraceTest, NamesAreEscaped) {
  const std::string odd_name = "a \"quoted\" \\ name\twith\nbreaks and \x01 and caf\xc3\xa9";
  PlanBuilder builder("job \"with\" quotes");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4});
  builder.AddTask(odd_name, plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(2);
  builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  JsonValue trace = WriteAndParse(**job, "chrome_trace_escaped.json");
  auto tasks = CompleteEventsByTask(trace);
  EXPECT_EQ(tasks.count(odd_name), 1u);
  EXPECT_EQ(tasks[odd_name].pieces.size(), 2u);
  EXPECT_EQ(trace.Find("otherData")->Find("job_name")->string, "job \"with\" quotes");
}

TEST(ChromeTraceTest, FailedJobTraceHoldsTheActsBeforeTheFailure) {
  PlanBuilder builder("trace_failure");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(20);
  plan::Task& failing = builder.AddTask("failing", plan::COMPUTE, 0, {"x"}, {"y"}, "test_fail");
  PlanBuilder::SetAttribute(failing, "fail_piece", 5);
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_FALSE((*job)->Run().ok());
  JsonValue trace = WriteAndParse(**job, "chrome_trace_failure.json");
  EXPECT_EQ(EventsWithPhase(trace, "X").size(), (*job)->events().size());
}

TEST(ChromeTraceTest, WriteErrorNamesThePath) {
  PlanBuilder builder("trace_error");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(1);
  builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  std::string path = ::testing::TempDir() + "/no/such/directory/trace.json";
  absl::Status status = WriteChromeTrace(**job, path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST(ChromeTraceTest, TheRecordStopsAtItsCapAndTheTraceSaysSo) {
  const int pieces = 50;
  PlanBuilder builder("trace_cap");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(pieces);
  builder.AddTask("plus", plan::COMPUTE, 1, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  JobOptions options;
  options.max_recorded_events = 40;
  auto job = MakeJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // The job ran to its end; its record kept only the first 40 of its 150 acts.
  EXPECT_EQ(SinkValues(**job, "sink").size(), static_cast<size_t>(pieces));
  EXPECT_EQ((*job)->events().size(), 40u);
  EXPECT_TRUE((*job)->events_truncated());

  JsonValue trace = WriteAndParse(**job, "chrome_trace_cap.json");
  std::vector<const JsonValue*> notes = EventsWithPhase(trace, "i");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0]->Find("name")->string, HasSubstr("trace truncated"));
  EXPECT_THAT(notes[0]->Find("name")->string, HasSubstr("first 40 acts"));
  EXPECT_EQ(notes[0]->Find("cat")->string, "trace_truncated");
  EXPECT_EQ(notes[0]->Find("args")->Find("max_recorded_events")->number, 40);
}

TEST(ChromeTraceTest, ARecordUnderItsCapIsNotTruncated) {
  PlanBuilder builder("trace_under_cap");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(5);
  builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
  JobOptions options;
  options.max_recorded_events = 10;
  auto job = MakeJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_EQ((*job)->events().size(), 10u);
  EXPECT_FALSE((*job)->events_truncated());
  EXPECT_EQ(CountOccurrences(ChromeTraceJson(**job), "trace_truncated"), 0u);
}

TEST(ChromeTraceTest, ANegativeCapIsRefused) {
  PlanBuilder builder("trace_negative_cap");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(1);
  builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
  JobOptions options;
  options.max_recorded_events = -1;
  auto job = MakeJob(builder.plan(), options);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("max_recorded_events"));
}

}  // namespace
}  // namespace loom::testing
