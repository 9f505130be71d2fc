#include "tools/loomctl/job_summary.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/format_bytes.h"
#include "core/json_string.h"
#include "glog/logging.h"
#include "runtime/device_memory.h"

namespace loom::loomctl {

std::string TaskKindName(plan::TaskKind kind) {
  return absl::AsciiStrToLower(plan::TaskKind_Name(kind));
}

std::string FormatMilliseconds(int64_t nanoseconds) {
  return absl::StrFormat("%.3f", static_cast<double>(nanoseconds) / 1e6);
}

std::string FileNamePart(const std::string& name) {
  std::string result = name;
  for (char& character : result) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(character)) && character != '.' &&
        character != '-' && character != '_') {
      character = '_';
    }
  }
  return result;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows, size_t text_columns) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      std::string padding(widths[c] - row[c].size(), ' ');
      line += c < text_columns ? row[c] + padding : padding + row[c];
    }
    // No trailing spaces.
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&text, line, "\n");
  }
  return text;
}

void SetLogVerbosity(bool verbose) {
  FLAGS_minloglevel = verbose ? google::GLOG_INFO : google::GLOG_WARNING;
  FLAGS_v = verbose ? 1 : 0;
}

std::string FormatActorTable(const JobRuntime& job) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"actor", "kind", "stream", "acts", "busy ms", "blocked-on-input ms",
                  "blocked-on-output ms", "waiting-for-thread ms"});
  for (const ActorSummary& summary : job.Summaries()) {
    rows.push_back({summary.name, TaskKindName(summary.kind), summary.stream,
                    absl::StrCat(summary.acts), FormatMilliseconds(summary.busy_nanoseconds),
                    FormatMilliseconds(summary.blocked_on_input_nanoseconds),
                    FormatMilliseconds(summary.blocked_on_output_nanoseconds),
                    FormatMilliseconds(summary.waiting_for_thread_nanoseconds)});
  }
  return FormatTable(rows, 3);
}

std::string FormatSummaryFooter(const JobRuntime& job) {
  std::vector<ActorSummary> summaries = job.Summaries();
  absl::flat_hash_set<std::string> streams;
  int64_t acts = 0;
  for (const ActorSummary& summary : summaries) {
    streams.insert(summary.stream);
    acts += summary.acts;
  }
  std::string text =
      absl::StrCat("job '", job.plan().job_name(), "': ", summaries.size(), " actors on ",
                   streams.size(), " stream threads, ", acts, " acts\n");
  absl::StrAppend(&text, "makespan: ", FormatMilliseconds(job.makespan_nanoseconds()), " ms\n");
  text += "peak memory:\n";
  std::vector<std::vector<std::string>> memory_rows;
  for (const auto& memory : job.device_memories()) {
    memory_rows.push_back({absl::StrCat("  ", memory->device_name()),
                           FormatBytes(memory->peak_bytes()),
                           memory->budget_bytes() > 0
                               ? absl::StrCat("(budget ", FormatBytes(memory->budget_bytes()), ")")
                               : std::string("(no budget)")});
  }
  absl::StrAppend(&text, FormatTable(memory_rows, 1));
  return text;
}

std::string FormatSummaryText(const JobRuntime& job) {
  return absl::StrCat(FormatActorTable(job), "\n", FormatSummaryFooter(job));
}

std::string FormatSummaryJson(const JobRuntime& job, const absl::Status& status,
                              const std::string& trace_path,
                              const std::vector<std::string>& fetched_files, JsonLayout layout) {
  // Where the multi-line layout breaks lines; JsonString escapes newlines inside strings, so these
  // are the only ones.
  const char* newline = layout == JsonLayout::kMultiLine ? "\n" : "";
  std::vector<ActorSummary> summaries = job.Summaries();
  int64_t acts = 0;
  for (const ActorSummary& summary : summaries) acts += summary.acts;

  std::string json = absl::StrCat("{\"job_name\":", JsonString(job.plan().job_name()),
                                  ",\"status\":", JsonString(status.ok() ? "ok" : "failed"));
  if (!status.ok()) absl::StrAppend(&json, ",\"error\":", JsonString(status.ToString()));
  absl::StrAppend(&json, ",\"makespan_ms\":", FormatMilliseconds(job.makespan_nanoseconds()),
                  ",\"acts\":", acts, ",", newline, "\"actors\":[");
  for (size_t i = 0; i < summaries.size(); ++i) {
    const ActorSummary& summary = summaries[i];
    absl::StrAppend(
        &json, i == 0 ? "" : ",", newline, "{\"name\":", JsonString(summary.name),
        ",\"kind\":", JsonString(TaskKindName(summary.kind)),
        ",\"stream\":", JsonString(summary.stream), ",\"acts\":", summary.acts,
        ",\"busy_ms\":", FormatMilliseconds(summary.busy_nanoseconds),
        ",\"blocked_on_input_ms\":", FormatMilliseconds(summary.blocked_on_input_nanoseconds),
        ",\"blocked_on_output_ms\":", FormatMilliseconds(summary.blocked_on_output_nanoseconds),
        ",\"waiting_for_thread_ms\":", FormatMilliseconds(summary.waiting_for_thread_nanoseconds),
        "}");
  }
  absl::StrAppend(&json, "],", newline, "\"devices\":[");
  const auto& memories = job.device_memories();
  for (size_t i = 0; i < memories.size(); ++i) {
    absl::StrAppend(&json, i == 0 ? "" : ",", newline,
                    "{\"device\":", JsonString(memories[i]->device_name()),
                    ",\"peak_bytes\":", memories[i]->peak_bytes(),
                    ",\"budget_bytes\":", memories[i]->budget_bytes(), "}");
  }
  absl::StrAppend(&json, "],", newline, "\"trace\":");
  json += trace_path.empty() ? "null" : JsonString(trace_path);
  json += ",\"fetched_files\":[";
  for (size_t i = 0; i < fetched_files.size(); ++i) {
    absl::StrAppend(&json, i == 0 ? "" : ",", JsonString(fetched_files[i]));
  }
  json += "]}\n";
  return json;
}

}  // namespace loom::loomctl
