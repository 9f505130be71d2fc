// A job's GetPlanResponse serialized straight from the compiled job (daemon/plan_response.h)
// reads back as the copied response, plain and compressed.
#include "daemon/plan_response.h"

#include <string>

#include "daemon/compressed_message.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

using google::protobuf::util::MessageDifferencer;

TEST(PlanResponseTest, SerializedReadsBackAsTheCopiedResponse) {
  std::string note;
  // Two nodes of two devices: a whole plan and two node plans.
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled = compiler::ReadAndCompileJob(
      LOOM_SOURCE_DIR "/examples/jobs/mlp_data_parallel.pbtxt", compiler::DeviceSet::Cpus(4, 2),
      /*steps=*/0, &note);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const v1::GetPlanResponse expected = PlanResponseOf(**compiled);
  ASSERT_EQ(expected.node_plans_size(), 2);
  ASSERT_GT(expected.plan().tasks_size(), 0);

  absl::StatusOr<std::string> plain = SerializedPlanResponse(**compiled, /*compressed=*/false);
  ASSERT_TRUE(plain.ok()) << plain.status();
  v1::GetPlanResponse read;
  ASSERT_TRUE(read.ParseFromString(*plain));
  EXPECT_TRUE(MessageDifferencer::Equals(read, expected));

  absl::StatusOr<std::string> compressed = SerializedPlanResponse(**compiled, /*compressed=*/true);
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  EXPECT_LT(compressed->size(), plain->size());
  v1::GetPlanResponse inflated;
  ASSERT_TRUE(ParseCompressedMessage(*compressed, &inflated));
  EXPECT_TRUE(MessageDifferencer::Equals(inflated, expected));
}

}  // namespace
}  // namespace loom::daemon
