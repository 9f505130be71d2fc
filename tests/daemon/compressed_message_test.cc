// Messages kept compressed by the coordinator: they round-trip; damaged bytes are refused.
#include "daemon/compressed_message.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::Lt;

// A plan of `tasks` tasks named as the compiler names them.
v1::GetPlanResponse PlanOf(int tasks) {
  v1::GetPlanResponse response;
  response.mutable_plan()->set_job_name("gpt");
  for (int index = 0; index < tasks; ++index) {
    plan::Task* task = response.mutable_plan()->add_tasks();
    task->set_name("h." + std::to_string(index % 4) + ".attn.c_attn.matmul.backward_" +
                   std::to_string(index));
    task->add_inputs("h." + std::to_string(index % 4) + ".ln_1.out_" + std::to_string(index));
    task->add_outputs("h." + std::to_string(index % 4) + ".attn.out_" + std::to_string(index));
    task->set_priority(index % 7);
  }
  return response;
}

TEST(CompressedMessageTest, APlanRoundTripsInAFractionOfItsSize) {
  const v1::GetPlanResponse plan = PlanOf(2000);
  const std::string compressed = CompressedMessage(plan);
  EXPECT_THAT(compressed.size(), Lt(plan.ByteSizeLong() / 3));
  v1::GetPlanResponse parsed;
  ASSERT_TRUE(ParseCompressedMessage(compressed, &parsed));
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, plan));
}

TEST(CompressedMessageTest, AnEmptyMessageRoundTrips) {
  v1::GetPlanResponse parsed = PlanOf(1);
  ASSERT_TRUE(ParseCompressedMessage(CompressedMessage(v1::GetPlanResponse()), &parsed));
  EXPECT_EQ(parsed.ByteSizeLong(), 0u);
}

TEST(CompressedMessageTest, DamagedBytesAreRefused) {
  const std::string compressed = CompressedMessage(PlanOf(200));
  v1::GetPlanResponse parsed;
  EXPECT_FALSE(ParseCompressedMessage(compressed.substr(0, compressed.size() / 2), &parsed));
  EXPECT_FALSE(ParseCompressedMessage("not zlib at all", &parsed));
  std::string flipped = compressed;
  flipped[flipped.size() / 2] ^= 0x5a;
  EXPECT_FALSE(ParseCompressedMessage(flipped, &parsed));
}

}  // namespace
}  // namespace loom::daemon
