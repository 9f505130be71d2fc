// A finished job's events held serialized: packing keeps the fetched tensors parsed, unpacking
// gives every event back in sequence order, from any sequence on.
#include "daemon/packed_events.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::google::protobuf::util::TimeUtil;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Lt;

std::shared_ptr<v1::JobEvent> EventOf(int64_t sequence) {
  auto event = std::make_shared<v1::JobEvent>();
  event->set_job_id("job-1234");
  event->set_sequence(sequence);
  *event->mutable_time() = TimeUtil::GetCurrentTime();
  return event;
}

// With a loss, step time and throughput that vary as measured ones do (they would compress far
// better if they did not).
std::shared_ptr<v1::JobEvent> StepEventOf(int64_t sequence, int64_t step) {
  static std::mt19937_64 random(7);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  std::shared_ptr<v1::JobEvent> event = EventOf(sequence);
  v1::StepEvent* step_event = event->mutable_step();
  step_event->set_step(step);
  step_event->set_num_steps(10000);
  step_event->set_loss(5.5 * noise(random) / std::sqrt(step));
  step_event->set_step_time_seconds(0.0123 * noise(random));
  step_event->set_tokens_per_second(123456.5 * noise(random));
  return event;
}

// state, step, step, fetched, checkpoint, step, fetched, state.
HeldEvents MixedEvents() {
  HeldEvents events;
  events.push_back(EventOf(0));
  events.back()->mutable_state_change()->set_state(v1::JOB_STATE_RUNNING);
  events.push_back(StepEventOf(1, 1));
  events.push_back(StepEventOf(2, 2));
  events.push_back(EventOf(3));
  events.back()->mutable_fetched()->set_tensor("logits");
  events.back()->mutable_fetched()->set_data(std::string(64, 'x'));
  events.push_back(EventOf(4));
  events.back()->mutable_checkpoint()->set_step(2);
  events.push_back(StepEventOf(5, 3));
  events.push_back(EventOf(6));
  events.back()->mutable_fetched()->set_tensor("logits");
  events.push_back(EventOf(7));
  events.back()->mutable_state_change()->set_state(v1::JOB_STATE_SUCCEEDED);
  return events;
}

std::vector<int64_t> SequencesOf(const EventList& events) {
  std::vector<int64_t> sequences;
  for (const auto& event : events) sequences.push_back(event->sequence());
  return sequences;
}

TEST(PackedEventsTest, PackingKeepsTheFetchedTensorsParsedAndUnpackingGivesEveryEventBack) {
  const HeldEvents original = MixedEvents();
  HeldEvents events = original;
  const std::string packed = PackEvents(&events);
  EXPECT_THAT(SequencesOf(EventList(events.begin(), events.end())), ElementsAre(3, 6));
  // The parsed events the caller shared (a watcher's batch) are untouched.
  EXPECT_TRUE(original[1]->has_step());

  const EventList unpacked = WithPackedEvents(packed, EventList(events.begin(), events.end()), 0);
  ASSERT_EQ(unpacked.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(*unpacked[i], *original[i])) << i;
  }
  // The fetched tensors are the held ones, not copies.
  EXPECT_EQ(unpacked[3].get(), events[0].get());
}

TEST(PackedEventsTest, UnpackingStartsAtTheSequenceAskedFor) {
  HeldEvents events = MixedEvents();
  const std::string packed = PackEvents(&events);
  // The caller passes the held events from that sequence on; the packed ones are filtered.
  EXPECT_THAT(SequencesOf(WithPackedEvents(packed, {events[1]}, 5)), ElementsAre(5, 6, 7));
  EXPECT_THAT(SequencesOf(WithPackedEvents(packed, {}, 8)), IsEmpty());
}

TEST(PackedEventsTest, AStepEventPacksIntoAFewDozenBytes) {
  HeldEvents events;
  for (int64_t step = 1; step <= 10000; ++step) events.push_back(StepEventOf(step, step));
  const std::string packed = PackEvents(&events);
  EXPECT_TRUE(events.empty());
  // Serialized, a step event takes about 60 bytes; compressed about 30 (the timestamps, losses
  // and times vary, the rest repeats).
  EXPECT_THAT(packed.size() / 10000.0, Lt(40));
  EXPECT_EQ(WithPackedEvents(packed, {}, 0).size(), 10000);
}

TEST(PackedEventsTest, BytesThatDoNotParseAddNothing) {
  const std::shared_ptr<const v1::JobEvent> held = EventOf(3);
  EXPECT_THAT(SequencesOf(WithPackedEvents("\xff\xff\xff", {held}, 0)), ElementsAre(3));
}

}  // namespace
}  // namespace loom::daemon
