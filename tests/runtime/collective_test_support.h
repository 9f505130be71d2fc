#ifndef LOOM_TESTS_RUNTIME_COLLECTIVE_TEST_SUPPORT_H_
#define LOOM_TESTS_RUNTIME_COLLECTIVE_TEST_SUPPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"

namespace loom::testing {

// Helpers for tests that drive collective backends directly (no actors): one thread per rank,
// buffers of every rank, and the shared-memory backend's outputs as the reference.

// A communicator "comm" whose rank r is CPU device r of node node_of_rank[r].
plan::Communicator MakeTestCommunicator(const std::vector<int>& node_of_rank, int num_collectives,
                                        int index = 5);

plan::CollectiveConf MakeCollectiveConf(plan::CollectiveKind kind, int64_t sequence,
                                        const std::string& name,
                                        plan::ReduceOperation reduce = plan::REDUCE_SUM,
                                        int axis = 0, int concat_axis = 0);

// One collective to run: its conf, data type and every rank's input shape.
struct CollectiveCase {
  plan::CollectiveConf conf;
  plan::DataType data_type = plan::FLOAT32;
  std::vector<Shape> inputs;
  // For failure messages.
  std::string Describe() const;
};

struct RankBuffers {
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> outputs;
};

// Random inputs (floats of mixed signs and magnitudes, so that the order of a sum shows in its
// last bits; random bytes for other types) and outputs of the shapes the inputs give, filled with
// a marker byte.
RankBuffers MakeRankBuffers(const CollectiveCase& test_case, uint32_t seed);

// Runs rank r's part of `conf` on its own thread against backends[r]; returns each rank's status.
std::vector<absl::Status> RunRanks(const std::vector<CollectiveBackend*>& backends,
                                   const plan::CollectiveConf& conf, RankBuffers& buffers,
                                   int64_t piece = 0);

// The outputs SharedMemoryCollectives computes for `buffers`' inputs.
std::vector<HostTensor> ReferenceOutputs(const CollectiveCase& test_case,
                                         const RankBuffers& buffers);

}  // namespace loom::testing

#endif  // LOOM_TESTS_RUNTIME_COLLECTIVE_TEST_SUPPORT_H_
