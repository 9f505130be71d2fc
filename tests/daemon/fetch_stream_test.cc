// Jobs submitted with stream_fetches: their fetched tensors reach the watchers, assembled from
// every rank, once per piece; the limits are checked at submit; the next such job releases them.
#include <map>
#include <string>
#include <vector>

#include "client/fetched_tensor.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

using FetchStreamTest = DaemonTest;

// The values of a float32 piece, read as a client library user would.
std::vector<float> FloatsOf(const v1::FetchedTensor& fetched) {
  absl::StatusOr<HostTensor> tensor = HostTensorOf(fetched);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  if (!tensor.ok()) return {};
  absl::Span<const float> values = tensor->Values<float>();
  return std::vector<float>(values.begin(), values.end());
}

// The fetched events, by tensor, in the order received.
std::map<std::string, std::vector<v1::FetchedTensor>> FetchedOf(
    const std::vector<v1::JobEvent>& events) {
  std::map<std::string, std::vector<v1::FetchedTensor>> fetched;
  for (const v1::JobEvent& event : events) {
    if (event.has_fetched()) fetched[event.fetched().tensor()].push_back(event.fetched());
  }
  return fetched;
}

std::vector<int64_t> PiecesOf(const std::vector<v1::FetchedTensor>& fetched) {
  std::vector<int64_t> pieces;
  for (const v1::FetchedTensor& piece : fetched) pieces.push_back(piece.piece());
  return pieces;
}

v1::SubmitJobRequest StreamingRequest(const job::Job& job) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_stream_fetches(true);
  return request;
}

TEST_F(FetchStreamTest, EveryPieceReachesTheWatcherAssembledFromEveryRank) {
  // The fetched tensors do not count against the step events a job keeps: 6 of them are 4 state
  // changes and the last 2 steps, while 18 fetched tensors come.
  DaemonOptions options = TestOptions();
  options.max_events_per_job = 6;
  StartDaemon(options);
  // Data parallel over cpu:0 and cpu:1, 3 steps of 2 micro-batches: "ones_total" is the sum of
  // the two ranks' partial sums (16), "ones_per_column" [4] of 4s, "loss" a scalar.
  const std::string id = SubmitStreamingOrDie(CountingJob(3, "ones_total", "ones_per_column"));
  const std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED)
      << events.back().DebugString();

  std::map<std::string, std::vector<v1::FetchedTensor>> fetched = FetchedOf(events);
  ASSERT_THAT(fetched, SizeIs(3));
  const std::vector<int64_t> every_piece = {0, 1, 2, 3, 4, 5};
  for (const auto& [tensor, pieces] : fetched) {
    EXPECT_THAT(PiecesOf(pieces), ElementsAreArray(every_piece)) << tensor;
    for (const v1::FetchedTensor& piece : pieces) {
      EXPECT_EQ(piece.data_type(), plan::FLOAT32) << tensor;
    }
  }
  for (const v1::FetchedTensor& piece : fetched["ones_total"]) {
    EXPECT_THAT(piece.shape(), IsEmpty());
    EXPECT_THAT(FloatsOf(piece), ElementsAre(16.0f)) << piece.piece();
  }
  for (const v1::FetchedTensor& piece : fetched["ones_per_column"]) {
    EXPECT_THAT(piece.shape(), ElementsAre(4));
    EXPECT_THAT(FloatsOf(piece), ElementsAre(4.0f, 4.0f, 4.0f, 4.0f)) << piece.piece();
  }
  // The loss pieces are those the step events average.
  const std::vector<v1::StepEvent> steps = StepsOf(events);
  ASSERT_THAT(steps, SizeIs(3));
  const std::vector<v1::FetchedTensor>& losses = fetched["loss"];
  EXPECT_FLOAT_EQ(steps.back().loss(), (FloatsOf(losses[4])[0] + FloatsOf(losses[5])[0]) / 2);

  v1::JobInfo info;
  ASSERT_TRUE(GetJob(id, &info).ok());
  EXPECT_TRUE(info.streams_fetches());
  EXPECT_FALSE(info.fetches_released());
  // A late watcher gets them all too, though the first step's event made room for the end.
  const std::vector<v1::JobEvent> replay = WatchToEnd(id);
  EXPECT_THAT(StepsOf(replay), SizeIs(2));
  fetched = FetchedOf(replay);
  for (const auto& [tensor, pieces] : fetched) {
    EXPECT_THAT(PiecesOf(pieces), ElementsAreArray(every_piece)) << tensor;
  }
  EXPECT_THAT(fetched, SizeIs(3));
}

TEST_F(FetchStreamTest, AJobThatDoesNotStreamSendsNoFetchedTensors) {
  const std::string id = SubmitOrDie(CountingJob(2, "ones_total", "ones_per_column"));
  const std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(FetchedOf(events), IsEmpty());
  v1::JobInfo info;
  ASSERT_TRUE(GetJob(id, &info).ok());
  EXPECT_FALSE(info.streams_fetches());
}

TEST_F(FetchStreamTest, TheLimitsAreCheckedAtSubmitNamingTheTensor) {
  // FetchingJob fetches "twice" ([64, 64] float32 per step: two micro-batches of [32, 64], 8 KiB
  // each) and the loss per micro-batch.
  DaemonOptions options = TestOptions();
  options.max_fetched_bytes = 50 << 10;
  StartDaemon(options);
  v1::SubmitJobResponse response;
  // 3 steps: 48 KiB and 24 bytes of losses.
  grpc::Status status = SubmitRequest(StreamingRequest(FetchingJob(3)), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // 4 steps: 64 KiB.
  status = SubmitRequest(StreamingRequest(FetchingJob(4)), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("'twice'"));
  EXPECT_THAT(status.error_message(), HasSubstr("--max-fetched-bytes"));
  // Without streaming, the same job is fine: nothing is held.
  EXPECT_TRUE(Submit(FetchingJob(4), &response).ok());
  // So many steps that their bytes would overflow a 64-bit count.
  job::Job endless = FetchingJob(1);
  endless.set_num_steps(int64_t{1} << 62);
  status = SubmitRequest(StreamingRequest(endless), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("--max-fetched-bytes"));

  // A piece larger than half a message.
  options.max_message_bytes = 8 << 10;
  StartDaemon(options);
  status = SubmitRequest(StreamingRequest(FetchingJob(1)), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("fetched tensor 'twice' [32, 64] has 8192 bytes"));
  EXPECT_THAT(status.error_message(), HasSubstr("--max-message-size"));
}

TEST_F(FetchStreamTest, AJobThatFetchesNothingCannotStream) {
  job::Job job = ParseJob(R"pb(
    name: "nothing_fetched"
    placement { devices: [ "cpu:0" ] }
    inputs {
      name: "x"
      shape: [ 4, 4 ]
      random_normal { std: 1 seed: 1 }
    }
    ops { name: "y" type: "relu" inputs: "x" outputs: "y" }
  )pb");
  v1::SubmitJobResponse response;
  grpc::Status status = SubmitRequest(StreamingRequest(job), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("'nothing_fetched'"));
  EXPECT_THAT(status.error_message(), HasSubstr("fetches none"));
}

TEST_F(FetchStreamTest, TheNextJobThatStreamsReleasesTheFetchedTensorsOfTheLast) {
  const std::string first = SubmitStreamingOrDie(CountingJob(2, "ones_total", "ones_per_column"));
  const std::vector<v1::JobEvent> first_events = WatchToEnd(first);
  ASSERT_THAT(FetchedOf(first_events)["ones_total"], SizeIs(4));

  // A job that does not stream releases nothing.
  const std::string plain = SubmitOrDie(TrainingJob(2));
  WatchToEnd(plain);
  // The finished job's fetched tensors and its other (packed) events, in their order.
  const std::vector<v1::JobEvent> late_events = WatchToEnd(first);
  ASSERT_EQ(late_events.size(), first_events.size());
  for (size_t i = 0; i < first_events.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(late_events[i], first_events[i])) << i;
  }

  // Nor does one that fails before its first piece (its embedding's first act: ids out of range).
  const std::string failed = SubmitStreamingOrDie(ParseJob(R"pb(
    name: "bad-ids"
    placement { devices: [ "cpu:0", "cpu:1" ] }
    optimizer { sgd { learning_rate: 0.01 } }
    loss: "loss"
    inputs {
      name: "ids"
      shape: [ 8, 4 ]
      data_type: INT32
      random_integers_below: 100
      seed: 1
    }
    variables {
      name: "table"
      shape: [ 10, 4 ]
      initializer { normal { std: 0.5 seed: 2 } }
    }
    ops {
      name: "emb"
      type: "embedding"
      inputs: [ "table", "ids" ]
      outputs: "e"
    }
    ops { name: "loss" type: "reduce_mean" inputs: "e" outputs: "loss" }
  )pb"));
  const std::vector<v1::JobEvent> failed_events = WatchToEnd(failed);
  ASSERT_FALSE(failed_events.empty());
  EXPECT_EQ(failed_events.back().state_change().state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(FetchedOf(failed_events), IsEmpty());
  EXPECT_THAT(FetchedOf(WatchToEnd(first))["ones_total"], SizeIs(4));
  v1::JobInfo info;
  ASSERT_TRUE(GetJob(first, &info).ok());
  EXPECT_FALSE(info.fetches_released());

  const std::string second = SubmitStreamingOrDie(CountingJob(2, "ones_total", "ones_per_column"));
  EXPECT_THAT(FetchedOf(WatchToEnd(second))["ones_total"], SizeIs(4));

  // The first job's other events are all there, the fetched tensors gone.
  const std::vector<v1::JobEvent> replay = WatchToEnd(first);
  EXPECT_THAT(FetchedOf(replay), IsEmpty());
  EXPECT_EQ(StatesOf(replay), StatesOf(first_events));
  EXPECT_EQ(StepsOf(replay).size(), StepsOf(first_events).size());
  ASSERT_TRUE(GetJob(first, &info).ok());
  EXPECT_TRUE(info.streams_fetches());
  EXPECT_TRUE(info.fetches_released());
  ASSERT_TRUE(GetJob(second, &info).ok());
  EXPECT_FALSE(info.fetches_released());
}

}  // namespace
}  // namespace loom::daemon::testing
