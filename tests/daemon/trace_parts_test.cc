// A job's trace read in parts (GetTraceRequest.offset / max_bytes): a trace may be larger than a
// gRPC message (a 100-step trace of a small GPT on 4 devices is 70 MB, over loomd's default
// 64 MiB), so loomctl asks for it in parts, each ending on a whole UTF-8 character.
#include "daemon/trace_parts.h"

#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::testing::HasSubstr;

TEST(TracePartLengthTest, APartEndsOnAWholeCharacter) {
  EXPECT_EQ(TracePartLength("abc", 5), 3u);     // the rest fits
  EXPECT_EQ(TracePartLength("abcdef", 4), 4u);  // ASCII: exactly max_bytes
  const std::string text =
      "ab\xC3\xA9"
      "cd";                                 // "abécd": é is 2 bytes at 2..3
  EXPECT_EQ(TracePartLength(text, 3), 2u);  // would cut é: before it
  EXPECT_EQ(TracePartLength(text, 4), 4u);  // after it
  const std::string euro =
      "\xE2\x82\xAC"
      "x";                                  // €: 3 bytes
  EXPECT_EQ(TracePartLength(euro, 1), 3u);  // longer than max_bytes: the character whole
  EXPECT_EQ(TracePartLength(euro, 2), 3u);
  EXPECT_EQ(TracePartLength(euro, 3), 3u);
}

TEST(PackedTraceTest, ReadsAnyRangeAcrossItsChunks) {
  std::string document = "{\"traceEvents\":[";
  for (int event = 0; event < 2000; ++event) {
    absl::StrAppend(&document, "{\"name\":\"op ", event % 17, " \xC3\xA9\",\"ts\":", event * 3,
                    "},");
  }
  document += "]}";
  const PackedTrace packed(document, /*chunk_bytes=*/1000);
  EXPECT_EQ(packed.total_bytes(), static_cast<int64_t>(document.size()));
  EXPECT_LT(packed.packed_bytes(), packed.total_bytes() / 2);
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t offset = std::uniform_int_distribution<int64_t>(0, document.size())(random);
    const int64_t length = std::uniform_int_distribution<int64_t>(1, 5000)(random);
    absl::StatusOr<std::string> bytes = packed.Read(offset, length);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, document.substr(offset, length)) << offset << " " << length;
  }
  EXPECT_EQ(*packed.Read(document.size(), 10), "");
  EXPECT_EQ(*packed.Read(document.size() + 1, 10), "");  // past the end: nothing
  EXPECT_EQ(*packed.Read(std::numeric_limits<int64_t>::max() - 5, 10), "");
  EXPECT_EQ(PackedTrace("").total_bytes(), 0);
  EXPECT_EQ(*PackedTrace("").Read(0, 10), "");
}

// Whether the daemon keeps ended jobs' traces in memory or in its data directory.
class TraceInPartsTest : public DaemonTest, public ::testing::WithParamInterface<bool> {
 protected:
  static constexpr int kMessageBytes = 256 << 10;

  void SetUp() override {
    DaemonOptions options = TestOptions();
    options.max_message_bytes = kMessageBytes;
    if (GetParam()) {
      directory_ =
          (std::filesystem::path(::testing::TempDir()) / absl::StrCat("trace-parts-", getpid()))
              .string();
      std::filesystem::remove_all(directory_);
      options.data_directory = directory_;
    }
    StartDaemon(options);
  }

  void TearDown() override {
    DaemonTest::TearDown();
    if (!directory_.empty()) std::filesystem::remove_all(directory_);
  }

  grpc::Status GetTrace(const std::string& id, int64_t offset, int64_t max_bytes,
                        v1::GetTraceResponse* response) {
    v1::GetTraceRequest request;
    request.set_job_id(id);
    request.set_offset(offset);
    request.set_max_bytes(max_bytes);
    return jobs_->GetTrace(ContextWithDeadline().get(), request, response);
  }

  std::string directory_;
};

TEST_P(TraceInPartsTest, ATraceLargerThanAMessageIsReadInParts) {
  const std::string id = SubmitTracedOrDie(TrainingJob(60));
  WatchToEnd(id);
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));

  // Whole, it does not fit: RESOURCE_EXHAUSTED saying what to do.
  v1::GetTraceResponse response;
  grpc::Status whole = GetTrace(id, 0, 0, &response);
  ASSERT_EQ(whole.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << whole.error_message();
  EXPECT_THAT(whole.error_message(), HasSubstr("more than fits in a message"));
  EXPECT_THAT(whole.error_message(), HasSubstr("ask for it in parts"));

  // Parts of at most 10,000 bytes, each from where the last ended.
  std::string document;
  int64_t total = -1;
  int64_t acts = 0;
  int parts = 0;
  while (total < 0 || static_cast<int64_t>(document.size()) < total) {
    grpc::Status status = GetTrace(id, document.size(), 10000, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_LE(response.chrome_trace_json().size(), 10000u);
    ASSERT_FALSE(response.chrome_trace_json().empty());
    document += response.chrome_trace_json();
    total = response.total_bytes();
    acts = response.acts();
    ++parts;
  }
  EXPECT_GT(total, kMessageBytes);
  EXPECT_GE(parts, total / 10000);
  EXPECT_EQ(static_cast<int64_t>(document.size()), total);
  EXPECT_TRUE(document.starts_with("{\"displayTimeUnit\"")) << document.substr(0, 40);
  EXPECT_TRUE(document.ends_with("\n]}\n")) << document.substr(total - 40);
  EXPECT_EQ(CompleteEvents(document), acts);
  EXPECT_GT(acts, 0);

  // The rest from an offset near the end fits: max_bytes 0 gives it.
  ASSERT_TRUE(GetTrace(id, total - 100, 0, &response).ok());
  EXPECT_EQ(response.chrome_trace_json(), document.substr(total - 100));
  // A part asked larger than a message is cut to fit.
  ASSERT_TRUE(GetTrace(id, 0, 1 << 30, &response).ok());
  EXPECT_LT(response.chrome_trace_json().size(), static_cast<size_t>(kMessageBytes));
  EXPECT_EQ(response.chrome_trace_json(), document.substr(0, response.chrome_trace_json().size()));
  // At the end: nothing; past it, or negative: INVALID_ARGUMENT.
  ASSERT_TRUE(GetTrace(id, total, 10, &response).ok());
  EXPECT_EQ(response.chrome_trace_json(), "");
  grpc::Status past = GetTrace(id, total + 1, 10, &response);
  EXPECT_EQ(past.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(past.error_message(), HasSubstr("past the end"));
  EXPECT_EQ(GetTrace(id, -1, 10, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GetTrace(id, std::numeric_limits<int64_t>::max(), 0, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // The client library asks in parts and gives the document whole.
  absl::StatusOr<v1::GetTraceResponse> trace = TraceThroughClient(id, kMessageBytes);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->chrome_trace_json(), document);
  EXPECT_EQ(trace->acts(), acts);
}

// Without a data directory the coordinator keeps --max-kept-trace-bytes of traces: the oldest go
// first, the newest stays whatever its size.
TEST_F(DaemonTest, TheOldestTracesAreDroppedToKeepTheirBytesUnderTheLimit) {
  DaemonOptions options = TestOptions();
  options.max_kept_trace_bytes = 1;  // less than any trace
  StartDaemon(options);
  const std::string first = SubmitTracedOrDie(TrainingJob(2));
  WatchToEnd(first);
  const std::string second = SubmitTracedOrDie(TrainingJob(2));
  WatchToEnd(second);
  ASSERT_TRUE(WaitForState(second, v1::JOB_STATE_SUCCEEDED));
  v1::GetTraceRequest request;
  request.set_job_id(second);
  v1::GetTraceResponse trace;
  grpc::Status kept = jobs_->GetTrace(ContextWithDeadline().get(), request, &trace);
  ASSERT_TRUE(kept.ok()) << kept.error_message();
  EXPECT_GT(trace.acts(), 0);
  request.set_job_id(first);
  grpc::Status dropped = jobs_->GetTrace(ContextWithDeadline().get(), request, &trace);
  EXPECT_EQ(dropped.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(dropped.error_message(), HasSubstr("was dropped"));
  EXPECT_THAT(dropped.error_message(), HasSubstr("--max-kept-trace-bytes"));
}

INSTANTIATE_TEST_SUITE_P(KeptInMemoryOrInTheDataDirectory, TraceInPartsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "DataDirectory" : "Memory";
                         });

}  // namespace
}  // namespace loom::daemon::testing
