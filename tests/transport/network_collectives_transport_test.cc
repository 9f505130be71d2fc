// NetworkCollectives over real UCX: two TransportNetworks in one process (TCP loopback), three
// ranks split 2 + 1 over them, every kind compared byte for byte with the shared-memory backend.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/collectives/network_collectives.h"
#include "tests/runtime/collective_test_support.h"
#include "tests/transport/transport_test_util.h"
#include "transport/transport_network.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

class NetworkCollectivesOverUcxTest : public ::testing::Test {
 protected:
  void SetUp() override { transport::testing::UseTcpTransports(); }

  // Nodes 0..count-1, each connected to every other one.
  void Connect(int count) {
    for (int node = 0; node < count; ++node) {
      absl::StatusOr<std::unique_ptr<transport::TransportNetwork>> network =
          transport::TransportNetwork::Create(node);
      ASSERT_TRUE(network.ok()) << network.status();
      networks_.push_back(*std::move(network));
      networks_.back()->SetHandlers(
          [](const ActorMessage&) {},
          [](const absl::Status& status) { LOG(WARNING) << "network error: " << status; });
    }
    for (int node = 0; node < count; ++node) {
      for (int peer = 0; peer < count; ++peer) {
        if (node == peer) continue;
        ASSERT_TRUE(networks_[node]->Connect(peer, networks_[peer]->address()).ok());
      }
    }
  }

  std::vector<std::unique_ptr<transport::TransportNetwork>> networks_;
};

TEST_F(NetworkCollectivesOverUcxTest, EveryKindEqualsSharedMemoryBitForBit) {
  Connect(2);
  const std::vector<int> placement = {0, 0, 1};
  const plan::Communicator communicator = MakeTestCommunicator(placement, 4);
  std::vector<std::unique_ptr<CollectiveBackend>> backends;
  for (int node = 0; node < 2; ++node) {
    absl::StatusOr<std::unique_ptr<CollectiveBackend>> backend =
        MakeNetworkCollectives(communicator, node, networks_[node].get());
    ASSERT_TRUE(backend.ok()) << backend.status();
    backends.push_back(*std::move(backend));
  }
  std::vector<CollectiveBackend*> backend_of_rank;
  for (int node : placement) backend_of_rank.push_back(backends[node].get());

  const std::vector<CollectiveCase> cases = {
      // 4 MiB per rank: large enough for UCX's rendezvous protocol.
      {MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads"), plan::FLOAT32,
       std::vector<Shape>(3, Shape{1 << 20})},
      {MakeCollectiveConf(plan::REDUCE_SCATTER, 1, "scatter", plan::REDUCE_SUM, 1), plan::FLOAT32,
       std::vector<Shape>(3, Shape{6, 1001})},
      {MakeCollectiveConf(plan::ALL_GATHER, 2, "gather", plan::REDUCE_SUM, 1),
       plan::FLOAT32,
       {Shape{4, 3}, Shape{4, 2}, Shape{4, 2}}},
      {MakeCollectiveConf(plan::ALL_TO_ALL, 3, "exchange", plan::REDUCE_SUM, 0, 1), plan::INT64,
       std::vector<Shape>(3, Shape{7, 5})},
  };
  // Twice through the order: the second round reuses staging buffers and wraps the sequence.
  for (int round = 0; round < 2; ++round) {
    for (const CollectiveCase& test_case : cases) {
      SCOPED_TRACE(absl::StrCat("round ", round, ": ", test_case.Describe()));
      RankBuffers buffers = MakeRankBuffers(test_case, 7 + round);
      const std::vector<HostTensor> expected = ReferenceOutputs(test_case, buffers);
      const std::vector<absl::Status> statuses =
          RunRanks(backend_of_rank, test_case.conf, buffers, round);
      for (int rank = 0; rank < 3; ++rank) {
        ASSERT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank];
        EXPECT_TRUE(buffers.outputs[rank].bytes == expected[rank].bytes) << "rank " << rank;
      }
    }
  }
}

TEST_F(NetworkCollectivesOverUcxTest, AStoppedPeerEndsTheCollective) {
  // Node 1's network stops while rank 0 waits for rank 1's header: rank 0 fails (its send to the
  // lost peer fails, or the runtime's abort after the error handler fires), it does not hang.
  Connect(2);
  const plan::Communicator communicator = MakeTestCommunicator({0, 1}, 1);
  NetworkCollectives::Options options;
  options.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<CollectiveBackend>> backend =
      MakeNetworkCollectives(communicator, 0, networks_[0].get(), options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  networks_[0]->SetHandlers([](const ActorMessage&) {},
                            [&](const absl::Status& status) {
                              (*backend)->Abort(status);  // what JobRuntime::Fail does
                            });
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads");
  std::vector<float> in(1024, 1.0f), out(1024);
  absl::Status status;
  std::thread rank0([&] {
    status = (*backend)->Run(CollectiveCall{
        0, &conf, 0, {in.data(), plan::FLOAT32, {1024}}, {out.data(), plan::FLOAT32, {1024}}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  networks_[1]->Stop();
  rank0.join();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("node 1"));
  networks_[0]->Stop();  // before `in` and `out` go away
}

}  // namespace
}  // namespace loom::testing
