// The error of a launch whose nodes cannot all reach each other names the node the others cannot
// reach (with its address), every failed pair, and what to check.
#include "daemon/reachability.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Describe(int node) {
  return absl::StrCat("node ", node, " ('n", node, "' at 10.0.0.", node + 1, ":7070)");
}

TEST(UnreachableNodesErrorTest, NamesTheNodeNoOtherNodeReaches) {
  // Node 2's link is down: nodes 0 and 1 cannot reach it, and it reaches neither.
  absl::Status error = UnreachableNodesError(
      "job-7", {0, 1, 2},
      {{0, {{2, "no probe from node 2 within 5s"}}},
       {1, {{2, "no probe from node 2 within 5s"}}},
       {2, {{0, "no probe from node 0 within 5s"}, {1, "no probe from node 1 within 5s"}}}},
      Describe);
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(error.message()),
              StartsWith("job 'job-7' cannot start: node 2 ('n2' at 10.0.0.3:7070) cannot be "
                         "reached from the other nodes of the job over UCX. "));
  EXPECT_THAT(std::string(error.message()),
              HasSubstr("node 0 ('n0' at 10.0.0.1:7070) cannot reach node 2 ('n2' at "
                        "10.0.0.3:7070): no probe from node 2 within 5s; "));
  EXPECT_THAT(std::string(error.message()),
              HasSubstr("node 2 ('n2' at 10.0.0.3:7070) cannot reach node 1"));
  EXPECT_THAT(std::string(error.message()), HasSubstr("UCX_NET_DEVICES"));
}

TEST(UnreachableNodesErrorTest, APairThatCannotReachEachOtherNamesNoCulprit) {
  absl::Status error = UnreachableNodesError(
      "job-1", {0, 1},
      {{0, {{1, "Endpoint timeout"}}}, {1, {{0, "no probe from node 0 within 5s"}}}}, Describe);
  EXPECT_THAT(std::string(error.message()),
              StartsWith("job 'job-1' cannot start: its nodes cannot all reach "
                         "each other over UCX. "));
  EXPECT_THAT(std::string(error.message()),
              HasSubstr("node 0 ('n0' at 10.0.0.1:7070) cannot reach node 1 ("
                        "'n1' at 10.0.0.2:7070): Endpoint timeout"));
}

TEST(UnreachableNodesErrorTest, ANodeReachedBySomeIsNoCulprit) {
  // Only node 0 reports node 2; node 1 reaches it.
  absl::Status error =
      UnreachableNodesError("job-2", {0, 1, 2}, {{0, {{2, "Endpoint timeout"}}}}, Describe);
  EXPECT_THAT(std::string(error.message()), HasSubstr("its nodes cannot all reach each other"));
  EXPECT_THAT(std::string(error.message()), Not(HasSubstr("cannot be reached from")));
}

}  // namespace
}  // namespace loom::daemon
