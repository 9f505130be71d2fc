// SharedMemoryCollectives driven directly, one thread per rank: the cross-rank sequence check,
// shapes that do not fit, deadlines, aborts and many consecutive collectives.
#include "runtime/collectives/shared_memory_collectives.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"
#include "tests/runtime/collective_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

plan::Communicator TestCommunicator(int size, int num_collectives) {
  plan::Communicator communicator;
  communicator.set_name("tp0");
  for (int rank = 0; rank < size; ++rank) *communicator.add_devices() = CpuDevice(rank);
  communicator.set_num_collectives(num_collectives);
  return communicator;
}

SharedMemoryCollectives::Options BackendOptions(absl::Duration timeout) {
  SharedMemoryCollectives::Options options;
  options.timeout = timeout;
  return options;
}

TEST(SharedMemoryCollectivesTest, RanksRunningDifferentCollectivesFailNamingBoth) {
  SharedMemoryCollectives backend(TestCommunicator(2, 2), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf first = Conf("tp0", plan::ALL_REDUCE, 0, "allreduce_a");
  plan::CollectiveConf second = Conf("tp0", plan::ALL_REDUCE, 1, "allreduce_b");
  std::vector<float> in0(4, 1.0f), in1(4, 2.0f), out0(4), out1(4);
  absl::Status status0, status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{1, &second, 0, TensorView{in1.data(), plan::FLOAT32, {4}},
                                         TensorView{out1.data(), plan::FLOAT32, {4}}});
  });
  status0 = backend.Run(CollectiveCall{0, &first, 0, TensorView{in0.data(), plan::FLOAT32, {4}},
                                       TensorView{out0.data(), plan::FLOAT32, {4}}});
  rank1.join();
  for (const absl::Status& status : {status0, status1}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("communicator 'tp0': rank 0 runs collective 'allreduce_a' (sequence 0) "
                          "while rank 1 runs 'allreduce_b' (sequence 1)"));
  }
  // The failure is permanent.
  EXPECT_EQ(backend
                .Run(CollectiveCall{0, &first, 1, TensorView{in0.data(), plan::FLOAT32, {4}},
                                    TensorView{out0.data(), plan::FLOAT32, {4}}})
                .code(),
            absl::StatusCode::kInternal);
}

TEST(SharedMemoryCollectivesTest, AllRanksSkippingTheOrderIsCaughtToo) {
  // Both ranks agree, but on sequence 1 where the communicator's order puts sequence 0.
  SharedMemoryCollectives backend(TestCommunicator(2, 2), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf second = Conf("tp0", plan::ALL_REDUCE, 1, "allreduce_b");
  std::vector<float> in0(4), in1(4), out0(4), out1(4);
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{1, &second, 0, TensorView{in1.data(), plan::FLOAT32, {4}},
                                         TensorView{out1.data(), plan::FLOAT32, {4}}});
  });
  absl::Status status0 =
      backend.Run(CollectiveCall{0, &second, 0, TensorView{in0.data(), plan::FLOAT32, {4}},
                                 TensorView{out0.data(), plan::FLOAT32, {4}}});
  rank1.join();
  EXPECT_EQ(status0.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status0.message(), HasSubstr("puts sequence 0"));
  EXPECT_EQ(status1, status0);
}

TEST(SharedMemoryCollectivesTest, ShapesThatDoNotFitTogetherFailEveryRank) {
  // Rank 1's output is one row short of the gather of both inputs.
  SharedMemoryCollectives backend(TestCommunicator(2, 1), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf conf = Conf("tp0", plan::ALL_GATHER, 0, "gather");
  std::vector<float> in0(6), in1(6), out0(12), out1(9);
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{1, &conf, 0, TensorView{in1.data(), plan::FLOAT32, {2, 3}},
                                         TensorView{out1.data(), plan::FLOAT32, {3, 3}}});
  });
  absl::Status status0 =
      backend.Run(CollectiveCall{0, &conf, 0, TensorView{in0.data(), plan::FLOAT32, {2, 3}},
                                 TensorView{out0.data(), plan::FLOAT32, {4, 3}}});
  rank1.join();
  EXPECT_EQ(status0.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status0.message(), HasSubstr("collective 'gather' (sequence 0): rank 1's output is "
                                           "[3, 3] but the inputs give it [4, 3]"));
  EXPECT_EQ(status1, status0);
}

TEST(SharedMemoryCollectivesTest, AMissingRankEndsInADeadlineNamingIt) {
  SharedMemoryCollectives backend(TestCommunicator(3, 1), BackendOptions(absl::Milliseconds(200)));
  plan::CollectiveConf conf = Conf("tp0", plan::ALL_REDUCE, 0, "grads");
  std::vector<float> in(4), out(4);
  auto start = std::chrono::steady_clock::now();
  absl::Status status =
      backend.Run(CollectiveCall{1, &conf, 5, TensorView{in.data(), plan::FLOAT32, {4}},
                                 TensorView{out.data(), plan::FLOAT32, {4}}});
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("communicator 'tp0': collective 'grads' (sequence 0) "
                                          "on rank 1 waited 200ms at piece 5 for ranks 0, 2 to "
                                          "arrive"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(190));
  EXPECT_LT(elapsed, std::chrono::seconds(5));
}

TEST(SharedMemoryCollectivesTest, AbortWakesAWaitingRank) {
  SharedMemoryCollectives backend(TestCommunicator(2, 1), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf conf = Conf("tp0", plan::ALL_GATHER, 0, "gather");
  std::vector<float> in(2), out(4);
  absl::Status status;
  auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] {
    status = backend.Run(CollectiveCall{0, &conf, 0, TensorView{in.data(), plan::FLOAT32, {2}},
                                        TensorView{out.data(), plan::FLOAT32, {4}}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  backend.Abort(absl::CancelledError("the job failed elsewhere"));
  rank0.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("the job failed elsewhere"));
}

TEST(SharedMemoryCollectivesTest, ManyConsecutiveCollectivesDoNotMix) {
  // Ranks race through 300 all-reduces; each round's inputs depend on the round, so a rank reading
  // a peer's previous or next round would be caught.
  const int size = 4;
  const int rounds = 300;
  SharedMemoryCollectives backend(TestCommunicator(size, 3), BackendOptions(absl::Seconds(60)));
  std::vector<plan::CollectiveConf> confs;
  for (int sequence = 0; sequence < 3; ++sequence) {
    confs.push_back(Conf("tp0", plan::ALL_REDUCE, sequence, absl::StrCat("c", sequence)));
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(size, 0);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      std::vector<float> in(37), out(37);
      for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(round * 10 + rank + i);
        absl::Status status = backend.Run(CollectiveCall{
            rank, &confs[round % 3], round, TensorView{in.data(), plan::FLOAT32, {37}},
            TensorView{out.data(), plan::FLOAT32, {37}}});
        if (!status.ok()) {
          ++failures[rank];
          return;
        }
        for (size_t i = 0; i < out.size(); ++i) {
          // sum over ranks of round * 10 + rank + i.
          float expected = static_cast<float>(size * (round * 10 + i) + size * (size - 1) / 2);
          if (out[i] != expected) ++failures[rank];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(failures[rank], 0) << "rank " << rank;
}

}  // namespace
}  // namespace loom::testing
