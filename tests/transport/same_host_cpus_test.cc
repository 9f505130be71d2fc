#include "transport/same_host_cpus.h"

#include "gtest/gtest.h"

namespace loom::transport {
namespace {

TEST(SameHostCpusTest, AloneWithACpu) {
  const SameHostCpus alone({3});
  EXPECT_EQ(alone.processes(), 1);
  EXPECT_EQ(alone.cpus(), 1);
  EXPECT_TRUE(alone.HaveACpuEach());
}

TEST(SameHostCpusTest, UnboundProcessesOnTwoCores) {
  SameHostCpus cpus({0, 1});
  cpus.AddPeer({0, 1});
  EXPECT_TRUE(cpus.HaveACpuEach());
  // Four ranks on two cores: the benchmarks' oversubscribed case.
  cpus.AddPeer({0, 1});
  cpus.AddPeer({0, 1});
  EXPECT_EQ(cpus.processes(), 4);
  EXPECT_EQ(cpus.cpus(), 2);
  EXPECT_FALSE(cpus.HaveACpuEach());
}

TEST(SameHostCpusTest, ProcessesBoundToCoresOfTheirOwn) {
  SameHostCpus cpus({0});
  cpus.AddPeer({1});
  EXPECT_TRUE(cpus.HaveACpuEach());
}

// A cluster started under `taskset -c 0` on a host of many cores: the host's core count would
// have them poll.
TEST(SameHostCpusTest, ProcessesSharingOneCpu) {
  SameHostCpus cpus({0});
  cpus.AddPeer({0});
  EXPECT_EQ(cpus.cpus(), 1);
  EXPECT_FALSE(cpus.HaveACpuEach());
}

// Three CPUs for three processes, but two of them confined to CPU 0: the union of the sets would
// count a core each.
TEST(SameHostCpusTest, MixedBindingsSharingACpu) {
  SameHostCpus cpus({0});
  cpus.AddPeer({0});
  cpus.AddPeer({1, 2});
  EXPECT_EQ(cpus.processes(), 3);
  EXPECT_EQ(cpus.cpus(), 3);
  EXPECT_FALSE(cpus.HaveACpuEach());
}

TEST(SameHostCpusTest, MixedBindingsWithACpuEach) {
  SameHostCpus cpus({0});
  cpus.AddPeer({1, 2});
  cpus.AddPeer({1, 2});
  EXPECT_TRUE(cpus.HaveACpuEach());
  cpus.AddPeer({2});
  EXPECT_FALSE(cpus.HaveACpuEach());
}

// The first process took CPU 0, the only one the second may use: the first moves to CPU 1.
TEST(SameHostCpusTest, AProcessMovesOverForALaterOne) {
  SameHostCpus cpus({0, 1});
  cpus.AddPeer({0});
  EXPECT_TRUE(cpus.HaveACpuEach());
  // A third whose first CPU cannot be freed takes its second.
  cpus.AddPeer({1, 2});
  EXPECT_TRUE(cpus.HaveACpuEach());
  cpus.AddPeer({0, 1, 2});
  EXPECT_FALSE(cpus.HaveACpuEach());
}

TEST(SameHostCpusTest, APeerWhoseCpusAreUnknownBringsNone) {
  SameHostCpus cpus({0, 1});
  cpus.AddPeer({});
  EXPECT_TRUE(cpus.HaveACpuEach());
  cpus.AddPeer({});
  EXPECT_FALSE(cpus.HaveACpuEach());
}

// An unknown peer may take any CPU the others may use, but only one left free.
TEST(SameHostCpusTest, AnUnknownPeerNeedsACpuTheOthersLeaveFree) {
  SameHostCpus cpus({0});
  cpus.AddPeer({0, 1});
  EXPECT_TRUE(cpus.HaveACpuEach());
  cpus.AddPeer({});
  EXPECT_EQ(cpus.processes(), 3);
  EXPECT_FALSE(cpus.HaveACpuEach());
}

}  // namespace
}  // namespace loom::transport
