// `loomctl cluster up --bind-cpus`: CPU lists and the CPUs each daemon gets.
#include "tools/loomctl/cpu_binding.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::loomctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(CpuListTest, ParsesAndFormatsTasksetLists) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList("8,0-3,2");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(0, 1, 2, 3, 8));
  EXPECT_EQ(FormatCpuList(*cpus), "0-3,8");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({0, 2, 3, 4, 7, 8}), "0,2-4,7-8");
}

TEST(CpuListTest, RejectsWhatIsNoCpu) {
  for (const char* bad : {"", "a", "1,", "-1", "3-1", "1-2-3", "0-99999"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(bad);
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_THAT(ParseCpuList("0,x").status().message(), HasSubstr("'x'"));
  EXPECT_THAT(ParseCpuList("3-1").status().message(), HasSubstr("backwards"));
}

TEST(NodeCpusTest, NoneBindsNothing) {
  absl::StatusOr<std::vector<std::vector<int>>> cpus = NodeCpus("none", 3, {0, 1});
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, IsEmpty());
}

TEST(NodeCpusTest, AutoSplitsTheAllowedCpusInOrder) {
  absl::StatusOr<std::vector<std::vector<int>>> two = NodeCpus("auto", 2, {0, 1, 2, 3});
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(*two, ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  // A cpuset with holes, not divisible by the nodes: the first groups take one more.
  absl::StatusOr<std::vector<std::vector<int>>> three = NodeCpus("auto", 3, {1, 2, 4, 5, 6, 9, 10});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_THAT(*three, ElementsAre(ElementsAre(1, 2, 4), ElementsAre(5, 6), ElementsAre(9, 10)));
  absl::StatusOr<std::vector<std::vector<int>>> one = NodeCpus("auto", 1, {0, 1});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, ElementsAre(ElementsAre(0, 1)));
}

TEST(NodeCpusTest, AutoRefusesFewerCpusThanNodes) {
  absl::StatusOr<std::vector<std::vector<int>>> cpus = NodeCpus("auto", 3, {0, 1});
  EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cpus.status().message(), HasSubstr("--bind-cpus auto: 3 nodes"));
  EXPECT_THAT(cpus.status().message(), HasSubstr("only 2 CPUs (0-1)"));
  EXPECT_THAT(cpus.status().message(), HasSubstr("a list per node (e.g. 0/1/0)"));
  EXPECT_EQ(NodeCpus("auto", 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NodeCpusTest, ListsNameEachNodesCpus) {
  absl::StatusOr<std::vector<std::vector<int>>> cpus = NodeCpus("0/1/0-1", 3, {0, 1});
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(0, 1)));
}

TEST(NodeCpusTest, ListsMustFitTheNodesAndTheAllowedCpus) {
  absl::StatusOr<std::vector<std::vector<int>>> count = NodeCpus("0/1", 3, {0, 1});
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(count.status().message(), HasSubstr("has 2 CPU lists for 3 nodes"));
  absl::StatusOr<std::vector<std::vector<int>>> outside = NodeCpus("0/4", 2, {0, 1, 2});
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.status().message(),
              HasSubstr("node1: CPU 4 is not one this process may use (0-2)"));
  absl::StatusOr<std::vector<std::vector<int>>> malformed = NodeCpus("0/", 2, {0, 1});
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr("node1: an empty CPU list"));
}

}  // namespace
}  // namespace loom::loomctl
