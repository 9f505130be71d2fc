// Shared by the tests of collectives as actors over the shared-memory backend: a kernel registry
// with a "test_pattern" source that fills any data type, tensors of any type read as doubles, the
// reference semantics of every collective kind computed element by element, and the plans that
// run one collective case (or two collectives in a local order) on CPU ranks.
// (collective_test_support.h is the other family: backends driven directly, no actors.)
#ifndef LOOM_TESTS_RUNTIME_COLLECTIVE_TEST_UTIL_H_
#define LOOM_TESTS_RUNTIME_COLLECTIVE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"

namespace loom::testing {

// ---------------------------------------------------------------------------------------------
// Test data: a kernel that fills any data type with small integers (exact in every type), and
// helpers to read tensors of any type as doubles.

// The CPU kernels, the test kernels and "test_pattern": output element i of piece p is
// (seed * 131 + p * 17 + i * 7) % 251, in the output's data type.
const KernelRegistry& CollectiveTestRegistry();

absl::StatusOr<std::unique_ptr<JobRuntime>> MakeCollectiveJob(const plan::Plan& plan,
                                                              JobOptions options = {});

std::vector<double> ToDoubles(const void* data, plan::DataType data_type, int64_t count);

std::vector<double> ToDoubles(const HostTensor& tensor);

// A dense tensor of doubles with naive multi-index access: the reference side.
struct ReferenceTensor {
  Shape shape;
  std::vector<double> values;

  std::vector<int64_t> Unravel(int64_t flat) const {
    std::vector<int64_t> index(shape.rank());
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      index[axis] = flat % shape.dimension(axis);
      flat /= shape.dimension(axis);
    }
    return index;
  }
  int64_t Ravel(const std::vector<int64_t>& index) const {
    int64_t flat = 0;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      EXPECT_GE(index[axis], 0);
      EXPECT_LT(index[axis], shape.dimension(axis));
      flat = flat * shape.dimension(axis) + index[axis];
    }
    return flat;
  }
  double At(const std::vector<int64_t>& index) const { return values[Ravel(index)]; }
};

// ---------------------------------------------------------------------------------------------
// The reference semantics (plan.proto's CollectiveKind), element by element.

struct CollectiveCase {
  std::string label;
  plan::CollectiveKind kind = plan::ALL_REDUCE;
  plan::ReduceOperation reduce = plan::REDUCE_SUM;
  int axis = 0;
  int concat_axis = 0;
  std::vector<Shape> inputs;  // by rank
  plan::DataType data_type = plan::FLOAT32;
  int pieces = 3;
};

inline int NumRanks(const CollectiveCase& c) { return static_cast<int>(c.inputs.size()); }

// The slice along `axis` of `length` entries that part `index` of `parts` holds. Written out here
// (not BalancedRange) so that the test checks the rule rather than repeats it: the first
// length % parts parts hold one more.
std::pair<int64_t, int64_t> SliceOf(int64_t length, int64_t parts, int64_t index);

Shape ReferenceOutputShape(const CollectiveCase& c, int rank);

ReferenceTensor ReferenceOutput(const CollectiveCase& c, const std::vector<ReferenceTensor>& inputs,
                                int rank);

// ---------------------------------------------------------------------------------------------
// Plans.

plan::Device CpuDevice(int index);

void AddCommunicator(PlanBuilder& builder, const std::string& name, std::vector<int> devices,
                     int num_collectives);

plan::CollectiveConf Conf(const std::string& communicator, plan::CollectiveKind kind,
                          int64_t sequence, const std::string& name);

plan::Task& AddCollective(PlanBuilder& builder, const std::string& name, int device,
                          const std::string& input, const std::string& output,
                          const plan::CollectiveConf& conf, int rank);

std::vector<int64_t> Dimensions(const Shape& shape);

// Per rank r: a source of the rank's input (the "random" kernel with seed 100 + r for float32,
// "test_pattern" otherwise) on cpu:r's compute stream, the collective on its communication
// stream, and a sink keeping [input, output] of every piece.
plan::Plan CasePlan(const CollectiveCase& c);

// Runs the case's plan and compares every piece of every rank's output with the reference.
void RunAndCheck(const CollectiveCase& c);

// The balanced split of a logical axis of `length` over `parts` ranks, as per-rank shapes.
std::vector<Shape> SplitShapes(std::vector<int64_t> logical, int axis, int parts);

std::vector<Shape> SameShapes(std::vector<int64_t> shape, int parts);

// Two all-reduces on one communicator of 2 ranks. Sequence 0's input is slow (a 3 ms sleep per
// piece), sequence 1's is ready at once, and sequence 1's task comes first in the plan: each rank
// must still run 0, 1, 0, 1, ...
plan::Plan TwoCollectivesPlan(int pieces);

}  // namespace loom::testing

#endif  // LOOM_TESTS_RUNTIME_COLLECTIVE_TEST_UTIL_H_
