// NetworkCollectives over an in-memory network of several nodes: every kind, size and placement
// of ranks on nodes, compared byte for byte with the shared-memory backend; the agreement check,
// aborts, deadlines and transfer errors.
#include "runtime/collectives/network_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/balanced_split.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/collectives/collective_header.h"
#include "tests/runtime/collective_test_support.h"
#include "tests/runtime/in_memory_network.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

NetworkCollectives::Options TestOptions(absl::Duration timeout = absl::Seconds(60)) {
  NetworkCollectives::Options options;
  options.timeout = timeout;
  return options;
}

// One backend per node of a communicator placed on the nodes of an in-memory network.
class Cluster {
 public:
  Cluster(const std::vector<int>& node_of_rank, int num_collectives,
          NetworkCollectives::Options options = TestOptions())
      : node_of_rank_(node_of_rank),
        communicator_(MakeTestCommunicator(node_of_rank, num_collectives)),
        network_(NumNodes(node_of_rank)) {
    for (int node = 0; node < NumNodes(node_of_rank); ++node) {
      absl::StatusOr<std::unique_ptr<NetworkCollectives>> backend =
          NetworkCollectives::Create(communicator_, node, network_.node(node), options);
      CHECK(backend.ok()) << backend.status();
      backends_.push_back(*std::move(backend));
    }
  }

  // The backend each rank calls.
  std::vector<CollectiveBackend*> BackendOfRank() const {
    std::vector<CollectiveBackend*> result;
    for (int node : node_of_rank_) result.push_back(backends_[node].get());
    return result;
  }
  NetworkCollectives& backend(int node) { return *backends_[node]; }
  InMemoryNetwork& network() { return network_; }

 private:
  static int NumNodes(const std::vector<int>& node_of_rank) {
    return *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  }

  const std::vector<int> node_of_rank_;
  const plan::Communicator communicator_;
  InMemoryNetwork network_;
  std::vector<std::unique_ptr<NetworkCollectives>> backends_;
};

std::string Placement(const std::vector<int>& node_of_rank) {
  return absl::StrCat("ranks on nodes [", absl::StrJoin(node_of_rank, ", "), "]");
}

// Every placement of 2, 3 and 4 ranks the tests use: all on one node, one per node, and mixes.
std::vector<std::vector<int>> Placements() {
  return {{0, 0},    {0, 1},    {0, 0, 0},    {0, 1, 2},    {0, 0, 1},
          {1, 0, 0}, {0, 1, 0}, {0, 1, 2, 3}, {0, 0, 1, 1}, {0, 1, 0, 1}};
}

// Runs `test_case` on `placement` and on the shared-memory backend; the outputs must be equal to
// the last bit.
void ExpectSameAsSharedMemory(const std::vector<int>& placement, const CollectiveCase& test_case,
                              uint32_t seed) {
  SCOPED_TRACE(absl::StrCat(test_case.Describe(), ", ", Placement(placement)));
  RankBuffers buffers = MakeRankBuffers(test_case, seed);
  const std::vector<HostTensor> expected = ReferenceOutputs(test_case, buffers);
  Cluster cluster(placement, 1);
  const std::vector<absl::Status> statuses =
      RunRanks(cluster.BackendOfRank(), test_case.conf, buffers);
  for (size_t rank = 0; rank < placement.size(); ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank];
    ASSERT_EQ(buffers.outputs[rank].bytes.size(), expected[rank].bytes.size());
    EXPECT_TRUE(buffers.outputs[rank].bytes == expected[rank].bytes)
        << "rank " << rank << "'s output differs from the shared-memory backend's";
  }
}

// Rank r's share of `length` (uneven inputs of a gather).
Shape WithAxis(Shape shape, int axis, int64_t length) {
  shape.set_dimension(axis, length);
  return shape;
}

TEST(NetworkCollectivesTest, AllReduceSumAndMaxEqualSharedMemoryBitForBit) {
  for (const std::vector<int>& placement : Placements()) {
    const int size = static_cast<int>(placement.size());
    for (plan::ReduceOperation reduce : {plan::REDUCE_SUM, plan::REDUCE_MAX}) {
      for (const Shape& shape :
           {Shape{1}, Shape{3}, Shape{7}, Shape{3, 5}, Shape{1001}, Shape{2, 3, 4}}) {
        CollectiveCase test_case{MakeCollectiveConf(plan::ALL_REDUCE, 0, "sum", reduce),
                                 plan::FLOAT32, std::vector<Shape>(size, shape)};
        ExpectSameAsSharedMemory(placement, test_case, 11);
      }
    }
  }
}

TEST(NetworkCollectivesTest, ReduceScatterAlongEveryAxisEqualsSharedMemoryBitForBit) {
  for (const std::vector<int>& placement : Placements()) {
    const int size = static_cast<int>(placement.size());
    for (plan::ReduceOperation reduce : {plan::REDUCE_SUM, plan::REDUCE_MAX}) {
      for (const Shape& shape :
           {Shape{1}, Shape{5}, Shape{8}, Shape{5, 3}, Shape{2, 7}, Shape{3, 2, 5}}) {
        for (int axis = 0; axis < shape.rank(); ++axis) {
          CollectiveCase test_case{
              MakeCollectiveConf(plan::REDUCE_SCATTER, 0, "scatter", reduce, axis), plan::FLOAT32,
              std::vector<Shape>(size, shape)};
          ExpectSameAsSharedMemory(placement, test_case, 23);
        }
      }
    }
  }
}

TEST(NetworkCollectivesTest, AllGatherOfUnevenInputsAlongEveryAxis) {
  for (const std::vector<int>& placement : Placements()) {
    const int size = static_cast<int>(placement.size());
    for (const Shape& base : {Shape{1}, Shape{5}, Shape{4, 3}, Shape{2, 5, 3}}) {
      for (int axis = 0; axis < base.rank(); ++axis) {
        for (int64_t length : {int64_t{1}, int64_t{5}, int64_t{8}}) {
          std::vector<Shape> inputs;
          for (int rank = 0; rank < size; ++rank) {
            inputs.push_back(WithAxis(base, axis, BalancedRange(length, size, rank).size()));
          }
          for (plan::DataType data_type : {plan::FLOAT32, plan::INT64, plan::UINT8}) {
            CollectiveCase test_case{
                MakeCollectiveConf(plan::ALL_GATHER, 0, "gather", plan::REDUCE_SUM, axis),
                data_type, inputs};
            ExpectSameAsSharedMemory(placement, test_case, 37);
          }
        }
      }
    }
  }
}

TEST(NetworkCollectivesTest, AllToAllBetweenEveryPairOfAxes) {
  for (const std::vector<int>& placement : Placements()) {
    const int size = static_cast<int>(placement.size());
    for (const Shape& base : {Shape{1}, Shape{7}, Shape{5, 3}, Shape{3, 4, 2}}) {
      for (int axis = 0; axis < base.rank(); ++axis) {
        for (int concat_axis = 0; concat_axis < base.rank(); ++concat_axis) {
          // Inputs differ along the concat axis (when it is not the split axis), as they may.
          std::vector<Shape> inputs;
          for (int rank = 0; rank < size; ++rank) {
            inputs.push_back(
                concat_axis == axis
                    ? base
                    : WithAxis(base, concat_axis, base.dimension(concat_axis) + rank % 2));
          }
          for (plan::DataType data_type : {plan::FLOAT32, plan::UINT16}) {
            CollectiveCase test_case{MakeCollectiveConf(plan::ALL_TO_ALL, 0, "exchange",
                                                        plan::REDUCE_SUM, axis, concat_axis),
                                     data_type, inputs};
            ExpectSameAsSharedMemory(placement, test_case, 41);
          }
        }
      }
    }
  }
}

TEST(NetworkCollectivesTest, LaterRunsMoveTheDataAloneAndStayExact) {
  // From its second run a collective posts its data without headers, sized by the shapes of the
  // first run: uneven gathers and all-to-alls must still land exactly.
  const std::vector<int> placement = {0, 1, 1};
  const int size = static_cast<int>(placement.size());
  std::vector<Shape> gathered, exchanged;
  for (int rank = 0; rank < size; ++rank) {
    gathered.push_back(Shape{BalancedRange(7, size, rank).size(), 3});
    exchanged.push_back(Shape{5, 4 + rank % 2});
  }
  const std::vector<CollectiveCase> cases = {
      {MakeCollectiveConf(plan::ALL_GATHER, 0, "gather", plan::REDUCE_SUM, 0), plan::FLOAT32,
       gathered},
      {MakeCollectiveConf(plan::ALL_TO_ALL, 1, "exchange", plan::REDUCE_SUM, 0, 1), plan::INT64,
       exchanged},
      {MakeCollectiveConf(plan::ALL_REDUCE, 2, "sum"), plan::FLOAT32,
       std::vector<Shape>(size, Shape{1001})},
      {MakeCollectiveConf(plan::REDUCE_SCATTER, 3, "scatter", plan::REDUCE_SUM, 1), plan::FLOAT32,
       std::vector<Shape>(size, Shape{3, 7})},
  };
  Cluster cluster(placement, static_cast<int>(cases.size()));
  for (int round = 0; round < 3; ++round) {
    for (const CollectiveCase& test_case : cases) {
      SCOPED_TRACE(absl::StrCat(test_case.Describe(), ", round ", round));
      RankBuffers buffers = MakeRankBuffers(test_case, 100 + round);
      const std::vector<HostTensor> expected = ReferenceOutputs(test_case, buffers);
      const std::vector<absl::Status> statuses =
          RunRanks(cluster.BackendOfRank(), test_case.conf, buffers, round);
      for (int rank = 0; rank < size; ++rank) {
        ASSERT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank];
        EXPECT_TRUE(buffers.outputs[rank].bytes == expected[rank].bytes) << "rank " << rank;
      }
    }
  }
}

TEST(NetworkCollectivesTest, LaterRunsMoveOnlyTheData) {
  // An all-to-all of 3 ranks: 6 headers and 6 blocks at its first run, the 6 blocks alone after.
  Cluster cluster({0, 1, 1}, 1);
  const plan::CollectiveConf conf =
      MakeCollectiveConf(plan::ALL_TO_ALL, 0, "exchange", plan::REDUCE_SUM, 0, 0);
  const CollectiveCase test_case{conf, plan::FLOAT32, std::vector<Shape>(3, Shape{6, 2})};
  for (int piece = 0; piece < 3; ++piece) {
    SCOPED_TRACE(absl::StrCat("piece ", piece));
    RankBuffers buffers = MakeRankBuffers(test_case, 10 + piece);
    const std::vector<HostTensor> expected = ReferenceOutputs(test_case, buffers);
    const int64_t before = cluster.network().transfers();
    for (const absl::Status& status : RunRanks(cluster.BackendOfRank(), conf, buffers, piece)) {
      ASSERT_TRUE(status.ok()) << status;
    }
    EXPECT_EQ(cluster.network().transfers() - before, piece == 0 ? 12 : 6);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_TRUE(buffers.outputs[rank].bytes == expected[rank].bytes) << "rank " << rank;
    }
  }
}

TEST(NetworkCollectivesTest, ACollectiveWhereARankHearsFromNotEveryPeerKeepsItsHeaders) {
  // Rank 1 brings nothing to the gather, so rank 0 hears from no peer but through the headers:
  // they go with every run, and a later mismatch is still named by every rank.
  Cluster cluster({0, 1}, 2, TestOptions(absl::Seconds(20)));
  const plan::CollectiveConf gather =
      MakeCollectiveConf(plan::ALL_GATHER, 0, "gather", plan::REDUCE_SUM, 0);
  const plan::CollectiveConf other =
      MakeCollectiveConf(plan::ALL_GATHER, 1, "other", plan::REDUCE_SUM, 0);
  const CollectiveCase test_case{gather, plan::FLOAT32, {Shape{3}, Shape{0}}};
  std::vector<CollectiveBackend*> backends = cluster.BackendOfRank();
  RankBuffers buffers = MakeRankBuffers(test_case, 4);
  for (int instance = 0; instance < 2; ++instance) {
    const plan::CollectiveConf& conf = instance == 0 ? gather : other;
    const int64_t before = cluster.network().transfers();
    for (const absl::Status& status : RunRanks(backends, conf, buffers, 0)) {
      ASSERT_TRUE(status.ok()) << status;
    }
    EXPECT_EQ(cluster.network().transfers() - before, 3);  // two headers, rank 0's input
  }
  const int64_t before = cluster.network().transfers();
  for (const absl::Status& status : RunRanks(backends, gather, buffers, 1)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  EXPECT_EQ(cluster.network().transfers() - before, 3);
  // Rank 1 runs 'gather' again where the order puts 'other'.
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backends[1]->Run(
        CollectiveCall{1, &gather, 2, buffers.inputs[1].View(), buffers.outputs[1].View()});
  });
  const absl::Status status0 = backends[0]->Run(
      CollectiveCall{0, &other, 1, buffers.inputs[0].View(), buffers.outputs[0].View()});
  rank1.join();
  for (const absl::Status& status : {status0, status1}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("rank 0 runs collective 'other' (sequence 1) while rank 1 runs "
                          "'gather' (sequence 0)"));
  }
}

TEST(NetworkCollectivesTest, ABufferThatChangesBetweenRunsFailsTheRankNamingIt) {
  // A node each: a failure of one of a node's ranks fails the others with its reason.
  Cluster cluster({0, 1, 2}, 1);
  const plan::CollectiveConf conf =
      MakeCollectiveConf(plan::ALL_GATHER, 0, "gather", plan::REDUCE_SUM, 0);
  CollectiveCase test_case{conf, plan::FLOAT32, {Shape{2}, Shape{2}, Shape{2}}};
  RankBuffers buffers = MakeRankBuffers(test_case, 5);
  for (const absl::Status& status : RunRanks(cluster.BackendOfRank(), conf, buffers, 0)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  // Rank 1 now brings 1 element, so every output shrinks to 5: the ranks agree with each other,
  // but not with the first run, and each finds it before any transfer is posted. (Receives
  // posted from the first run's shapes would write past the end of the outputs; AddressSanitizer
  // builds of this test would see it.)
  test_case.inputs[1] = Shape{1};
  buffers = MakeRankBuffers(test_case, 6);
  const int64_t before = cluster.network().transfers();
  const std::vector<absl::Status> statuses = RunRanks(cluster.BackendOfRank(), conf, buffers, 1);
  EXPECT_EQ(cluster.network().transfers(), before);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kInternal) << statuses[rank];
  }
  EXPECT_THAT(statuses[1].message(),
              HasSubstr("communicator 'comm': rank 1 runs collective 'gather' (sequence 0) with "
                        "its input float32 [1] where its earlier runs had float32 [2]"));
  EXPECT_THAT(statuses[0].message(),
              HasSubstr("rank 0 runs collective 'gather' (sequence 0) with its output float32 "
                        "[5] where its earlier runs had float32 [6]"));
  // A data type that changes is named the same way.
  Cluster typed({0, 1}, 1);
  const CollectiveCase floats{conf, plan::FLOAT32, {Shape{2}, Shape{2}}};
  RankBuffers first = MakeRankBuffers(floats, 7);
  for (const absl::Status& status : RunRanks(typed.BackendOfRank(), conf, first, 0)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  RankBuffers integers =
      MakeRankBuffers(CollectiveCase{conf, plan::INT64, {Shape{2}, Shape{2}}}, 8);
  for (const absl::Status& status : RunRanks(typed.BackendOfRank(), conf, integers, 1)) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(), HasSubstr("with its input int64 [2] where its earlier runs had "
                                            "float32 [2]"));
  }
}

TEST(NetworkCollectivesTest, ACollectiveWhoseSettingsChangeBetweenRunsIsNamed) {
  Cluster cluster({0, 1}, 1);
  const plan::CollectiveConf first =
      MakeCollectiveConf(plan::ALL_TO_ALL, 0, "exchange", plan::REDUCE_SUM, 0, 1);
  const plan::CollectiveConf changed =
      MakeCollectiveConf(plan::ALL_TO_ALL, 0, "exchange", plan::REDUCE_SUM, 1, 0);
  RankBuffers buffers =
      MakeRankBuffers(CollectiveCase{first, plan::FLOAT32, std::vector<Shape>(2, Shape{2, 2})}, 3);
  for (const absl::Status& status : RunRanks(cluster.BackendOfRank(), first, buffers, 0)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  for (const absl::Status& status : RunRanks(cluster.BackendOfRank(), changed, buffers, 1)) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("runs collective 'exchange' (sequence 0) as all-to-all axis 1 "
                          "concat_axis 0, where its earlier runs of sequence 0 ran 'exchange' "
                          "(sequence 0) as all-to-all axis 0 concat_axis 1"));
  }
}

TEST(NetworkCollectivesTest, ARankLeavingTheOrderAfterTheFirstRunNamesBothAtOnce) {
  // Both ranks ran 'a' and 'b' once, so at the next 'a' they move the data alone; rank 1 runs
  // 'b' there instead. It fails at once naming both collectives, before it sends anything; rank
  // 0, which waits for its data, ends when the job aborts it with that reason (the job controller
  // does it; here the test), not at its deadline.
  Cluster cluster({0, 1}, 2, TestOptions(absl::Seconds(20)));
  const plan::CollectiveConf first = MakeCollectiveConf(plan::ALL_REDUCE, 0, "a");
  const plan::CollectiveConf second =
      MakeCollectiveConf(plan::ALL_GATHER, 1, "b", plan::REDUCE_SUM, 0);
  RankBuffers reduced =
      MakeRankBuffers(CollectiveCase{first, plan::FLOAT32, std::vector<Shape>(2, Shape{64})}, 1);
  RankBuffers gathered =
      MakeRankBuffers(CollectiveCase{second, plan::FLOAT32, std::vector<Shape>(2, Shape{64})}, 2);
  std::vector<CollectiveBackend*> backends = cluster.BackendOfRank();
  for (const absl::Status& status : RunRanks(backends, first, reduced, 0)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  for (const absl::Status& status : RunRanks(backends, second, gathered, 0)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status status0;
  std::thread rank0([&] {
    status0 = backends[0]->Run(
        CollectiveCall{0, &first, 1, reduced.inputs[0].View(), reduced.outputs[0].View()});
  });
  const absl::Status status1 = backends[1]->Run(
      CollectiveCall{1, &second, 1, gathered.inputs[1].View(), gathered.outputs[1].View()});
  EXPECT_EQ(status1.code(), absl::StatusCode::kInternal) << status1;
  EXPECT_THAT(status1.message(),
              HasSubstr("communicator 'comm': rank 1 runs collective 'b' (sequence 1) as the "
                        "communicator's collective number 2, where its global order of 2 "
                        "collectives puts 'a' (sequence 0), which every rank ran before"));
  backends[0]->Abort(status1);
  rank0.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(status0.code(), absl::StatusCode::kAborted) << status0;
  EXPECT_THAT(status0.message(), HasSubstr("rank 1 runs collective 'b' (sequence 1)"));
}

TEST(NetworkCollectivesTest, ASumInRotatedOrderWouldDifferSoTheComparisonHasTeeth) {
  // The inputs make float sums order-dependent: a ring's rotated order gives other bits.
  CollectiveCase test_case{MakeCollectiveConf(plan::ALL_REDUCE, 0, "sum"), plan::FLOAT32,
                           std::vector<Shape>(3, Shape{4096})};
  RankBuffers buffers = MakeRankBuffers(test_case, 11);
  const std::vector<HostTensor> expected = ReferenceOutputs(test_case, buffers);
  const float* in[3];
  for (int rank = 0; rank < 3; ++rank) {
    in[rank] = reinterpret_cast<const float*>(buffers.inputs[rank].bytes.data());
  }
  const float* out = reinterpret_cast<const float*>(expected[0].bytes.data());
  int differences = 0;
  for (int i = 0; i < 4096; ++i) {
    const float rotated = (in[1][i] + in[2][i]) + in[0][i];
    if (std::memcmp(&rotated, &out[i], sizeof(float)) != 0) ++differences;
  }
  EXPECT_GT(differences, 100);
}

TEST(NetworkCollectivesTest, ManyConsecutiveCollectivesOfMixedKindsDoNotMix) {
  // Ranks race through rounds of three collectives; each round's inputs differ, so data from
  // another round (a tag confusion) would show.
  const std::vector<int> placement = {0, 1, 1};
  Cluster cluster(placement, 3);
  const std::vector<CollectiveCase> cases = {
      {MakeCollectiveConf(plan::ALL_REDUCE, 0, "c0"), plan::FLOAT32,
       std::vector<Shape>(3, Shape{37})},
      {MakeCollectiveConf(plan::ALL_GATHER, 1, "c1", plan::REDUCE_SUM, 1), plan::FLOAT32,
       std::vector<Shape>(3, Shape{2, 3})},
      {MakeCollectiveConf(plan::REDUCE_SCATTER, 2, "c2", plan::REDUCE_SUM, 0), plan::FLOAT32,
       std::vector<Shape>(3, Shape{7, 2})},
  };
  const int rounds = 60;
  std::vector<RankBuffers> buffers;
  std::vector<std::vector<HostTensor>> expected;
  for (int round = 0; round < rounds; ++round) {
    buffers.push_back(MakeRankBuffers(cases[round % 3], 1000 + round));
    expected.push_back(ReferenceOutputs(cases[round % 3], buffers.back()));
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(3, 0);
  std::vector<CollectiveBackend*> backends = cluster.BackendOfRank();
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      for (int round = 0; round < rounds; ++round) {
        RankBuffers& round_buffers = buffers[round];
        absl::Status status = backends[rank]->Run(
            CollectiveCall{rank, &cases[round % 3].conf, round, round_buffers.inputs[rank].View(),
                           round_buffers.outputs[rank].View()});
        if (!status.ok()) {
          ADD_FAILURE() << "rank " << rank << " round " << round << ": " << status;
          ++failures[rank];
          return;
        }
        if (round_buffers.outputs[rank].bytes != expected[round][rank].bytes) ++failures[rank];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(failures[rank], 0) << "rank " << rank;
}

TEST(NetworkCollectivesTest, TagsSeparateEveryField) {
  std::set<Network::Tag> tags;
  int count = 0;
  for (int communicator : {0, 1, NetworkCollectives::kMaxCommunicators - 1}) {
    for (int64_t instance : {0, 1, 65535}) {
      for (auto phase : {NetworkCollectives::Phase::kHeader, NetworkCollectives::Phase::kScatter,
                         NetworkCollectives::Phase::kGather}) {
        for (int source : {0, 1, NetworkCollectives::kMaxRanks - 1}) {
          for (int destination : {0, 2, NetworkCollectives::kMaxRanks - 1}) {
            const Network::Tag tag =
                NetworkCollectives::TransferTag(communicator, instance, phase, source, destination);
            EXPECT_NE(tag & Network::kCollectiveTagBit, 0u);
            tags.insert(tag);
            ++count;
          }
        }
      }
    }
  }
  EXPECT_EQ(static_cast<int>(tags.size()), count);
  // The instance wraps at 2^16 (ranks are never more than one collective apart).
  EXPECT_EQ(NetworkCollectives::TransferTag(3, 65536 + 7, NetworkCollectives::Phase::kGather, 1, 2),
            NetworkCollectives::TransferTag(3, 7, NetworkCollectives::Phase::kGather, 1, 2));
}

TEST(NetworkCollectivesTest, ACommunicatorTooLargeForTheTagsIsRejected) {
  InMemoryNetwork network(1);
  plan::Communicator communicator = MakeTestCommunicator({0, 0}, 1);
  communicator.set_index(NetworkCollectives::kMaxCommunicators);
  absl::StatusOr<std::unique_ptr<NetworkCollectives>> backend =
      NetworkCollectives::Create(communicator, 0, network.node(0), TestOptions());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.status().message(), HasSubstr("index 131072 is outside [0, 131072)"));

  communicator = MakeTestCommunicator(std::vector<int>(NetworkCollectives::kMaxRanks + 1, 0), 1);
  backend = NetworkCollectives::Create(communicator, 0, network.node(0), TestOptions());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.status().message(), HasSubstr("at most 16384 ranks"));

  communicator = MakeTestCommunicator({0, 1}, 1);
  communicator.mutable_devices(1)->set_type(plan::CUDA);
  backend = NetworkCollectives::Create(communicator, 0, network.node(0), TestOptions());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(NetworkCollectivesTest, RanksRunningDifferentCollectivesFailEveryRankNamingBoth) {
  Cluster cluster({0, 1, 1}, 2);
  const plan::CollectiveConf first = MakeCollectiveConf(plan::ALL_REDUCE, 0, "allreduce_a");
  const plan::CollectiveConf second = MakeCollectiveConf(plan::ALL_REDUCE, 1, "allreduce_b");
  CollectiveCase test_case{first, plan::FLOAT32, std::vector<Shape>(3, Shape{4})};
  RankBuffers buffers = MakeRankBuffers(test_case, 1);
  std::vector<CollectiveBackend*> backends = cluster.BackendOfRank();
  std::vector<absl::Status> statuses(3);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      statuses[rank] = backends[rank]->Run(CollectiveCall{rank, rank == 1 ? &second : &first, 0,
                                                          buffers.inputs[rank].View(),
                                                          buffers.outputs[rank].View()});
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("communicator 'comm': rank 0 runs collective 'allreduce_a' (sequence 0) "
                          "while rank 1 runs 'allreduce_b' (sequence 1)"));
  }
  // The failure is permanent.
  EXPECT_EQ(
      backends[0]
          ->Run(CollectiveCall{0, &first, 1, buffers.inputs[0].View(), buffers.outputs[0].View()})
          .code(),
      absl::StatusCode::kInternal);
}

TEST(NetworkCollectivesTest, ADifferentKindOnOneRankIsNamed) {
  Cluster cluster({0, 1}, 1);
  const plan::CollectiveConf reduce = MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads");
  const plan::CollectiveConf gather = MakeCollectiveConf(plan::ALL_GATHER, 0, "grads");
  std::vector<float> in0(4), in1(4), out0(4), out1(8);
  std::vector<CollectiveBackend*> backends = cluster.BackendOfRank();
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backends[1]->Run(CollectiveCall{
        1, &gather, 0, {in1.data(), plan::FLOAT32, {4}}, {out1.data(), plan::FLOAT32, {8}}});
  });
  absl::Status status0 = backends[0]->Run(CollectiveCall{
      0, &reduce, 0, {in0.data(), plan::FLOAT32, {4}}, {out0.data(), plan::FLOAT32, {4}}});
  rank1.join();
  for (const absl::Status& status : {status0, status1}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("rank 0 runs collective 'grads' (sequence 0), kind all-reduce, while "
                          "rank 1 runs 'grads' (sequence 0), kind all-gather"));
  }
}

TEST(NetworkCollectivesTest, ADifferentShapeOnOneRankIsNamed) {
  Cluster cluster({0, 0, 1}, 1);
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads");
  RankBuffers buffers =
      MakeRankBuffers(CollectiveCase{conf, plan::FLOAT32, std::vector<Shape>(3, Shape{4})}, 1);
  // Rank 2's buffers have 5 elements.
  buffers.inputs[2] = HostTensor{plan::FLOAT32, Shape{5}, std::vector<std::byte>(20)};
  buffers.outputs[2] = HostTensor{plan::FLOAT32, Shape{5}, std::vector<std::byte>(20)};
  for (const absl::Status& status : RunRanks(cluster.BackendOfRank(), conf, buffers)) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("collective 'grads' (sequence 0): all-reduce: rank 2's input [5] "
                          "differs from rank 0's input [4]"));
  }
}

TEST(NetworkCollectivesTest, AllRanksLeavingTheGlobalOrderIsCaught) {
  // Every rank agrees, but on sequence 1 where the order puts sequence 0.
  Cluster cluster({0, 1}, 2);
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 1, "allreduce_b");
  RankBuffers buffers =
      MakeRankBuffers(CollectiveCase{conf, plan::FLOAT32, std::vector<Shape>(2, Shape{4})}, 1);
  const std::vector<absl::Status> statuses = RunRanks(cluster.BackendOfRank(), conf, buffers);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(statuses[0].message(), HasSubstr("puts sequence 0"));
  EXPECT_EQ(statuses[1], statuses[0]);
}

TEST(NetworkCollectivesTest, AbortWakesAWaitingRankAndFailsLaterRuns) {
  Cluster cluster({0, 1}, 1);
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_GATHER, 0, "gather");
  std::vector<float> in(2), out(4);
  NetworkCollectives& backend = cluster.backend(0);
  absl::Status status;
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] {
    status = backend.Run(CollectiveCall{
        0, &conf, 0, {in.data(), plan::FLOAT32, {2}}, {out.data(), plan::FLOAT32, {4}}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t wakes_before = cluster.network().driver_wakes();
  backend.Abort(absl::CancelledError("the job failed elsewhere"));
  backend.Abort(absl::CancelledError("a later reason"));
  rank0.join();
  // A rank driving a real network sleeps on its events: the abort wakes it (see
  // TransportTest.WakeDriverMakesASleepingDriverLookAgain).
  EXPECT_EQ(cluster.network().driver_wakes(), wakes_before + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("the job failed elsewhere"));
  const absl::Status later = backend.Run(CollectiveCall{
      0, &conf, 1, {in.data(), plan::FLOAT32, {2}}, {out.data(), plan::FLOAT32, {4}}});
  EXPECT_EQ(later, status);
}

TEST(NetworkCollectivesTest, AMissingRankEndsInADeadlineNamingIt) {
  Cluster cluster({0, 0, 1}, 1, TestOptions(absl::Milliseconds(200)));
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads");
  std::vector<float> in0(4), in1(4), out0(4), out1(4);
  NetworkCollectives& backend = cluster.backend(0);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{
        1, &conf, 5, {in1.data(), plan::FLOAT32, {4}}, {out1.data(), plan::FLOAT32, {4}}});
  });
  const absl::Status status0 = backend.Run(CollectiveCall{
      0, &conf, 5, {in0.data(), plan::FLOAT32, {4}}, {out0.data(), plan::FLOAT32, {4}}});
  rank1.join();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  for (const absl::Status& status : {status0, status1}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr("communicator 'comm': collective 'grads' (sequence 0) "
                                            "on rank "));
    EXPECT_THAT(status.message(),
                HasSubstr("waited 200ms at piece 5 in the header exchange: has not heard from "
                          "rank 2 "));
  }
  EXPECT_EQ(status0, status1);  // the first failure is every rank's
  EXPECT_GE(elapsed, std::chrono::milliseconds(190));
  EXPECT_LT(elapsed, std::chrono::seconds(5));
}

TEST(NetworkCollectivesTest, ALostPeerFailsTheRunWithTheTransferError) {
  Cluster cluster({0, 1}, 1);
  cluster.network().FailNode(1, absl::UnavailableError("node 1 is gone"));
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads");
  RankBuffers buffers =
      MakeRankBuffers(CollectiveCase{conf, plan::FLOAT32, std::vector<Shape>(2, Shape{64})}, 1);
  const std::vector<absl::Status> statuses = RunRanks(cluster.BackendOfRank(), conf, buffers);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kUnavailable) << statuses[rank];
    EXPECT_THAT(statuses[rank].message(),
                HasSubstr(absl::StrCat("collective 'grads' (sequence 0) on rank ", rank)));
    EXPECT_THAT(statuses[rank].message(),
                HasSubstr("in the header exchange failed: node 1 is gone"));
  }
}

TEST(NetworkCollectivesTest, APeerLostDuringTheDataExchangeFailsTheRun) {
  // Rank 1 only takes part in the header exchange (by hand here), then its node is lost while
  // rank 0 exchanges data.
  Cluster cluster({0, 1}, 1);
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 0, "grads");
  const int64_t elements = 1 << 16;
  std::vector<float> in(elements, 1.0f), out(elements);
  absl::StatusOr<CollectiveHeader> header =
      CollectiveHeader::FromCall(CollectiveCall{1,
                                                &conf,
                                                0,
                                                {in.data(), plan::FLOAT32, {elements}},
                                                {out.data(), plan::FLOAT32, {elements}}},
                                 0);
  ASSERT_TRUE(header.ok());
  std::vector<std::byte> sent(CollectiveHeader::kBytes), received(CollectiveHeader::kBytes);
  header->Encode(sent.data());
  using Phase = NetworkCollectives::Phase;
  ASSERT_TRUE(cluster.network()
                  .node(1)
                  ->ReceiveData(NetworkCollectives::TransferTag(5, 0, Phase::kHeader, 0, 1),
                                received.data(), received.size(), [](absl::Status) {})
                  .ok());
  ASSERT_TRUE(cluster.network()
                  .node(1)
                  ->SendData(0, NetworkCollectives::TransferTag(5, 0, Phase::kHeader, 1, 0),
                             sent.data(), sent.size(), [](absl::Status) {})
                  .ok());
  absl::Status status;
  std::thread rank0([&] {
    status = cluster.backend(0).Run(CollectiveCall{0,
                                                   &conf,
                                                   0,
                                                   {in.data(), plan::FLOAT32, {elements}},
                                                   {out.data(), plan::FLOAT32, {elements}}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cluster.network().FailNode(1, absl::UnavailableError("node 1 is gone"));
  rank0.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("on rank 0: sending to rank 1 (node 1) in the data exchange failed: node "
                        "1 is gone"));
}

TEST(NetworkCollectivesTest, StagingBuffersComeFromTheRanksMemoryAndCountAgainstItsBudget) {
  // An all-to-all along axis 1 of [4, 6] float32 on 2 ranks: each rank packs its 4 x 3 block for
  // the peer (48 bytes) and receives the peer's block into staging (48 bytes).
  CollectiveCase test_case{
      MakeCollectiveConf(plan::ALL_TO_ALL, 0, "exchange", plan::REDUCE_SUM, 1, 1),
      plan::FLOAT32,
      {Shape{4, 6}, Shape{4, 6}}};
  {
    std::vector<std::shared_ptr<DeviceMemory>> memories = {
        std::make_shared<DeviceMemory>("node0/cpu:0", 0),
        std::make_shared<DeviceMemory>("node0/cpu:1", 0)};
    NetworkCollectives::Options options = TestOptions();
    options.memories = memories;
    Cluster cluster({0, 0}, 1, options);
    RankBuffers buffers = MakeRankBuffers(test_case, 5);
    const std::vector<HostTensor> expected = ReferenceOutputs(test_case, buffers);
    const std::vector<absl::Status> statuses =
        RunRanks(cluster.BackendOfRank(), test_case.conf, buffers);
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(statuses[rank].ok()) << statuses[rank];
      EXPECT_TRUE(buffers.outputs[rank].bytes == expected[rank].bytes) << "rank " << rank;
      EXPECT_EQ(memories[rank]->used_bytes(), 2 * 48) << "rank " << rank;
    }
  }
  // Rank 1's budget cannot hold its staging: every rank of the node fails with the error, which
  // names the device and the communicator.
  NetworkCollectives::Options options = TestOptions();
  options.memories = {std::make_shared<DeviceMemory>("node0/cpu:0", 0),
                      std::make_shared<DeviceMemory>("node0/cpu:1", 64)};
  Cluster cluster({0, 0}, 1, options);
  RankBuffers buffers = MakeRankBuffers(test_case, 5);
  const std::vector<absl::Status> statuses =
      RunRanks(cluster.BackendOfRank(), test_case.conf, buffers);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kResourceExhausted) << statuses[rank];
    EXPECT_THAT(statuses[rank].message(), HasSubstr("device node0/cpu:1: memory budget of 64 B"));
    EXPECT_THAT(statuses[rank].message(), HasSubstr("of communicator 'comm'"));
  }
}

TEST(NetworkCollectivesTest, ASingleRankCommunicatorCopies) {
  CollectiveCase test_case{
      MakeCollectiveConf(plan::ALL_REDUCE, 0, "solo"), plan::FLOAT32, {Shape{9}}};
  ExpectSameAsSharedMemory({0}, test_case, 3);
  test_case.conf = MakeCollectiveConf(plan::ALL_TO_ALL, 0, "solo", plan::REDUCE_SUM, 0, 1);
  test_case.inputs = {Shape{3, 4}};
  ExpectSameAsSharedMemory({0}, test_case, 3);
}

}  // namespace
}  // namespace loom::testing
