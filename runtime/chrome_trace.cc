#include "runtime/chrome_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/device_name.h"
#include "core/json_string.h"
#include "core/plan_steps.h"
#include "runtime/actor_id.h"
#include "runtime/job_runtime.h"
#include "runtime/plan_validation.h"

namespace loom {
namespace {

// Nanoseconds as microseconds with nanosecond precision ("12.345").
std::string Microseconds(int64_t nanoseconds) {
  return absl::StrFormat("%.3f", static_cast<double>(nanoseconds) / 1000.0);
}

// A metadata event: {"ph":"M","name":<kind>,"pid":..,"tid":..,"args":{<key>:<value>}}.
std::string MetadataEvent(const std::string& kind, int pid, int tid, const std::string& key,
                          const std::string& json_value) {
  return absl::StrCat("{\"ph\":\"M\",\"name\":", JsonString(kind), ",\"pid\":", pid,
                      ",\"tid\":", tid, ",\"args\":{", JsonString(key), ":", json_value, "}}");
}

// Where a task's acts are drawn: its device (a process) and its stream (a thread of it).
struct TraceLane {
  int pid = 0;
  int tid = 0;
};

}  // namespace

std::string ChromeTraceEvents(const JobRuntime& job, const TraceOffsets& offsets) {
  const plan::Plan& plan = job.plan();
  std::vector<std::string> events;

  // Processes: the plan's devices, in plan order, pid 1, 2, ... (node n's from n * 1000 + 1, so
  // that the traces of a job's nodes merge).
  absl::flat_hash_map<std::string, int> pid_of_device;
  for (int d = 0; d < plan.devices_size(); ++d) {
    std::string device = DeviceName(plan.devices(d).device());
    int pid = plan.node() * kTracePidsPerNode + d + 1;
    pid_of_device[device] = pid;
    events.push_back(MetadataEvent("process_name", pid, 0, "name", JsonString(device)));
    events.push_back(MetadataEvent("process_sort_index", pid, 0, "sort_index", absl::StrCat(pid)));
  }

  // Threads: the streams of each device, ordered by kind and index, tid 1, 2, ... per device.
  std::map<std::pair<int, uint64_t>, plan::Stream> streams;  // (pid, stream key) -> stream
  for (const plan::Task& task : plan.tasks()) {
    auto device = pid_of_device.find(DeviceName(task.stream().device()));
    int pid = device == pid_of_device.end() ? 0 : device->second;
    streams.emplace(std::make_pair(pid, ActorId::Make(task.stream(), 0).stream_key()),
                    task.stream());
  }
  std::map<std::pair<int, uint64_t>, int> tid_of_stream;
  std::map<int, int> threads_of_pid;
  for (const auto& [key, stream] : streams) {
    int tid = ++threads_of_pid[key.first];
    tid_of_stream[key] = tid;
    std::string name = StreamName(stream);
    std::string device = DeviceName(stream.device());
    // The process already names the device: the thread is the stream's own part ("compute").
    if (name.size() > device.size() + 1 && name.compare(0, device.size(), device) == 0) {
      name = name.substr(device.size() + 1);
    }
    events.push_back(MetadataEvent("thread_name", key.first, tid, "name", JsonString(name)));
    events.push_back(
        MetadataEvent("thread_sort_index", key.first, tid, "sort_index", absl::StrCat(tid)));
  }

  // Task index -> (position in the plan, lane).
  absl::flat_hash_map<uint32_t, std::pair<int, TraceLane>> task_of_index;
  for (int position = 0; position < plan.tasks_size(); ++position) {
    const plan::Task& task = plan.tasks(position);
    auto device = pid_of_device.find(DeviceName(task.stream().device()));
    TraceLane lane;
    lane.pid = device == pid_of_device.end() ? 0 : device->second;
    lane.tid = tid_of_stream[{lane.pid, ActorId::Make(task.stream(), 0).stream_key()}];
    task_of_index[TaskIndex(plan, position)] = {position, lane};
  }

  // One complete event per act.
  for (const ActEvent& event : job.events()) {
    auto found = task_of_index.find(event.task_index);
    std::string name = absl::StrCat("task #", event.task_index);
    std::string kind = "unknown";
    TraceLane lane;
    int64_t step = event.piece;
    std::string collective;  // a collective's kind, as an argument
    if (found != task_of_index.end()) {
      const plan::Task& task = plan.tasks(found->second.first);
      name = task.name();
      kind = absl::AsciiStrToLower(plan::TaskKind_Name(task.kind()));
      lane = found->second.second;
      step = StepOfPiece(task, event.piece);
      if (task.kind() == plan::COLLECTIVE) {
        collective = absl::StrCat(
            ",\"collective\":",
            JsonString(absl::AsciiStrToLower(plan::CollectiveKind_Name(task.collective().kind()))));
      }
    }
    events.push_back(
        absl::StrCat("{\"ph\":\"X\",\"name\":", JsonString(name), ",\"cat\":", JsonString(kind),
                     ",\"pid\":", lane.pid, ",\"tid\":", lane.tid,
                     ",\"ts\":", Microseconds(offsets.nanoseconds + event.start_nanoseconds),
                     ",\"dur\":", Microseconds(event.end_nanoseconds - event.start_nanoseconds),
                     ",\"args\":{\"piece\":", event.piece, ",\"step\":", offsets.steps + step + 1,
                     ",\"kind\":", JsonString(kind), collective, "}}"));
  }

  // A record that reached JobOptions::max_recorded_events says so: a global instant event at the
  // end of the last act recorded, on the node's first device.
  if (job.events_truncated()) {
    int64_t last = 0;
    for (const ActEvent& event : job.events()) last = std::max(last, event.end_nanoseconds);
    events.push_back(absl::StrCat(
        "{\"ph\":\"i\",\"s\":\"g\",\"name\":",
        JsonString(absl::StrCat("trace truncated: only the first ", job.max_recorded_events(),
                                " acts of node ", plan.node(), " were recorded")),
        ",\"cat\":\"trace_truncated\",\"pid\":", plan.node() * kTracePidsPerNode + 1,
        ",\"tid\":0,\"ts\":", Microseconds(offsets.nanoseconds + last),
        ",\"args\":{\"truncated\":true,\"max_recorded_events\":", job.max_recorded_events(), "}}"));
  }
  return absl::StrJoin(events, ",\n");
}

std::string ChromeTraceDocument(absl::string_view job_name,
                                const std::vector<std::string>& event_lists) {
  std::string json =
      absl::StrCat("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"job_name\":", JsonString(job_name),
                   "},\"traceEvents\":[\n");
  bool first = true;
  for (const std::string& events : event_lists) {
    if (events.empty()) continue;
    absl::StrAppend(&json, first ? "" : ",\n", events);
    first = false;
  }
  json += "\n]}\n";
  return json;
}

std::string ChromeTraceJson(const JobRuntime& job) {
  return ChromeTraceDocument(job.plan().job_name(), {ChromeTraceEvents(job)});
}

absl::Status WriteChromeTrace(const JobRuntime& job, const std::string& path) {
  return WriteChromeTraceFile(ChromeTraceJson(job), path);
}

absl::Status WriteChromeTraceFile(absl::string_view json, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open Chrome trace file '", path, "': ", std::strerror(errno)));
  }
  size_t written = std::fwrite(json.data(), 1, json.size(), file);
  int write_error = written == json.size() ? 0 : errno;
  if (std::fclose(file) != 0 && write_error == 0) write_error = errno;
  if (written != json.size() || write_error != 0) {
    if (write_error == 0) write_error = EIO;
    return absl::UnavailableError(
        absl::StrCat("cannot write Chrome trace file '", path, "': ", std::strerror(write_error)));
  }
  return absl::OkStatus();
}

}  // namespace loom
