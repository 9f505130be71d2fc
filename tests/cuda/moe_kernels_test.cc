// The CUDA mixture-of-experts kernels against the CPU kernels: moe_route's integer outputs
// (slot_token) exactly, with drops over capacity and ties, over several chunks of assignments;
// moe_route_grad, moe_dispatch, moe_combine and moe_dispatch_grad on real routes and on slots
// holding a token several times; bad slots reported by the next act; build-time errors.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::FloatTensor;
using kernel_test::Int32Tensor;
using kernel_test::IntAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

constexpr float kFloat32Tolerance = 1e-5f;
constexpr float kBfloat16Tolerance = 2e-2f;

// Builds the call twice (float32, then a fresh one run as bfloat16) and compares both with the
// CPU kernel; integer tensors stay int32 and are compared exactly.
void ExpectFloatTypesMatch(const std::string& op_type, const std::function<void(OpCall&)>& build) {
  {
    SCOPED_TRACE("float32");
    OpCall call(op_type);
    build(call);
    cuda_test::ExpectCudaMatchesCpu(call, kFloat32Tolerance);
  }
  {
    SCOPED_TRACE("bfloat16");
    OpCall call(op_type);
    build(call);
    cuda_test::ExpectCudaMatchesCpu(call, kBfloat16Tolerance, plan::BFLOAT16);
  }
}

struct RouteCase {
  int64_t groups, tokens, experts, capacity, k;
  std::vector<float> probs;

  std::string Describe() const {
    return absl::StrCat("B ", groups, " T ", tokens, " E ", experts, " C ", capacity, " k ", k);
  }
};

// moe_route's call, as tests/kernels/moe_kernels_test.cc builds it.
void BuildRoute(OpCall& call, const RouteCase& test_case) {
  const int64_t groups = test_case.groups, experts = test_case.experts;
  call.Attribute("k", IntAttribute(test_case.k))
      .Input(FloatTensor(Shape({groups, test_case.tokens, experts}), test_case.probs))
      .Output(Shape({groups, experts, test_case.capacity}), plan::INT32)
      .Output(Shape({groups, experts, test_case.capacity}))
      .Output(Shape({groups, experts}))
      .Output(Shape({groups}));
}

void ExpectRouteMatches(const RouteCase& test_case) {
  SCOPED_TRACE(test_case.Describe());
  ExpectFloatTypesMatch("moe_route", [&](OpCall& call) { BuildRoute(call, test_case); });
}

std::vector<float> RandomProbs(int64_t count, uint32_t seed) {
  return RandomFloats(count, seed, 0.01f, 1.0f);
}

// Every token prefers expert 0 by far, then expert 1 (with noise): most assignments drop.
std::vector<float> SkewedProbs(int64_t rows, int64_t experts, uint32_t seed) {
  std::vector<float> probs = RandomFloats(rows * experts, seed, 0.0f, 0.1f);
  for (int64_t row = 0; row < rows; ++row) {
    probs[row * experts] += 0.8f;
    if (experts > 1) probs[row * experts + 1] += 0.4f;
  }
  return probs;
}

// Probabilities from a few values only: many ties, which go to the lower expert.
std::vector<float> TiedProbs(int64_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int> level(1, 3);
  std::vector<float> probs(count);
  for (float& p : probs) p = 0.25f * static_cast<float>(level(engine));
  return probs;
}

// Slot tokens uniform in [-1, tokens): empty slots and tokens held by several slots.
std::vector<int32_t> RandomSlots(int64_t count, int64_t tokens, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int32_t> token(-1, static_cast<int32_t>(tokens) - 1);
  std::vector<int32_t> slots(count);
  for (int32_t& slot : slots) slot = token(engine);
  return slots;
}

TEST(CudaMoeRouteTest, HandWrittenCasesOfTheCpuTests) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectRouteMatches(
      {1, 4, 3, 2, 2, {0.6f, 0.3f, 0.1f, 0.5f, 0.1f, 0.4f, 0.7f, 0.2f, 0.1f, 0.1f, 0.3f, 0.6f}});
  ExpectRouteMatches({1, 2, 2, 1, 2, {0.6f, 0.4f, 0.3f, 0.7f}});
  ExpectRouteMatches({1, 1, 3, 1, 2, {0.4f, 0.4f, 0.2f}});
  ExpectRouteMatches({2, 2, 2, 2, 1, {0.3f, 0.7f, 0.9f, 0.1f, 0.5f, 0.5f, 0.2f, 0.8f}});
  std::vector<float> same;
  for (int t = 0; t < 8; ++t) same.insert(same.end(), {0.85f, 0.05f, 0.05f, 0.05f});
  ExpectRouteMatches({1, 8, 4, 2, 1, same});
  ExpectRouteMatches({1, 8, 4, 4, 2, same});
}

TEST(CudaMoeRouteTest, RandomRoutesOverSeveralChunksOfAssignments) {
  LOOM_SKIP_WITHOUT_GPU();
  // 300 tokens: a partial chunk of 256 assignments; 1000 tokens x 2: eight chunks.
  ExpectRouteMatches({3, 300, 8, 80, 2, RandomProbs(3 * 300 * 8, 1)});
  ExpectRouteMatches({2, 1000, 16, 100, 2, RandomProbs(2 * 1000 * 16, 2)});
  ExpectRouteMatches({2, 300, 8, 20, 1, RandomProbs(2 * 300 * 8, 3)});
  ExpectRouteMatches({2, 300, 8, 500, 2, RandomProbs(2 * 300 * 8, 4)});
  ExpectRouteMatches({1, 5, 1, 3, 1, RandomProbs(5, 5)});
  ExpectRouteMatches({1, 7, 2, 5, 2, RandomProbs(14, 6)});
}

TEST(CudaMoeRouteTest, SkewedRoutesDropExactlyAsTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectRouteMatches({2, 600, 4, 100, 2, SkewedProbs(2 * 600, 4, 7)});
  ExpectRouteMatches({2, 600, 4, 100, 1, SkewedProbs(2 * 600, 4, 8)});
  ExpectRouteMatches({1, 777, 64, 13, 2, SkewedProbs(777, 64, 9)});
  // No slots at all: every assignment drops.
  ExpectRouteMatches({2, 7, 3, 0, 2, RandomProbs(2 * 7 * 3, 10)});
}

TEST(CudaMoeRouteTest, TiesGoToTheLowerExpertAsOnTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectRouteMatches({3, 400, 6, 90, 2, TiedProbs(3 * 400 * 6, 11)});
  ExpectRouteMatches({3, 400, 6, 50, 1, TiedProbs(3 * 400 * 6, 12)});
  std::vector<float> equal(2 * 333 * 5, 0.2f);
  ExpectRouteMatches({2, 333, 5, 200, 2, equal});
}

// slot_token of moe_route on the CPU for `test_case`.
HostTensor CpuRouteSlots(const RouteCase& test_case) {
  OpCall route("moe_route");
  BuildRoute(route, test_case);
  absl::Status status = route.Run();
  EXPECT_TRUE(status.ok()) << status;
  return route.output(0);
}

void ExpectRouteGradMatches(int64_t k, const Shape& probs_shape, const std::vector<float>& probs,
                            const HostTensor& slot_token) {
  SCOPED_TRACE(absl::StrCat("k ", k, " probs ", probs_shape.ToString(), " slots ",
                            slot_token.shape.ToString()));
  ExpectFloatTypesMatch("moe_route_grad", [&](OpCall& call) {
    call.Attribute("k", IntAttribute(k))
        .Input(FloatTensor(probs_shape, probs))
        .Input(slot_token)
        .Input(FloatTensor(slot_token.shape,
                           RandomFloats(slot_token.shape.NumElements(), 21, -2.0f, 2.0f)))
        .Output(probs_shape);
  });
}

TEST(CudaMoeRouteGradTest, MatchesTheCpuOnRoutesAndOnArbitrarySlots) {
  LOOM_SKIP_WITHOUT_GPU();
  for (int64_t k : {1, 2}) {
    const RouteCase route{3, 300, 8, 60, k, RandomProbs(3 * 300 * 8, 13)};
    ExpectRouteGradMatches(k, Shape({3, 300, 8}), route.probs, CpuRouteSlots(route));
    const RouteCase skewed{2, 500, 4, 90, k, SkewedProbs(2 * 500, 4, 14)};
    ExpectRouteGradMatches(k, Shape({2, 500, 4}), skewed.probs, CpuRouteSlots(skewed));
    // Tokens in several slots, also of experts they did not choose.
    ExpectRouteGradMatches(k, Shape({2, 50, 6}), RandomProbs(2 * 50 * 6, 15),
                           Int32Tensor(Shape({2, 6, 40}), RandomSlots(2 * 6 * 40, 50, 16)));
  }
}

void ExpectDispatchMatches(const Shape& x_shape, const HostTensor& slot_token) {
  SCOPED_TRACE(x_shape.ToString() + " slots " + slot_token.shape.ToString());
  const Shape out_shape({slot_token.shape.dimension(0), slot_token.shape.dimension(1),
                         slot_token.shape.dimension(2), x_shape.dimension(2)});
  ExpectFloatTypesMatch("moe_dispatch", [&](OpCall& call) {
    call.Input(FloatTensor(x_shape, RandomFloats(x_shape.NumElements(), 31)))
        .Input(slot_token)
        .Output(out_shape);
  });
}

// moe_combine (weighted) or moe_dispatch_grad of rows [B, E, C, W] into [B, T, W].
void ExpectGatherMatches(const std::string& op_type, int64_t tokens, int64_t width,
                         const HostTensor& slot_token) {
  SCOPED_TRACE(op_type + " slots " + slot_token.shape.ToString());
  const Shape& slots = slot_token.shape;
  const Shape rows_shape({slots.dimension(0), slots.dimension(1), slots.dimension(2), width});
  const Shape y_shape({slots.dimension(0), tokens, width});
  ExpectFloatTypesMatch(op_type, [&](OpCall& call) {
    call.Attribute("tokens", IntAttribute(tokens))
        .Input(FloatTensor(rows_shape, RandomFloats(rows_shape.NumElements(), 32)))
        .Input(slot_token);
    if (op_type == "moe_combine") {
      call.Input(FloatTensor(slots, RandomFloats(slots.NumElements(), 33)));
    }
    call.Output(y_shape);
  });
}

TEST(CudaMoeSlotsTest, DispatchCombineAndDispatchGradMatchTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  const RouteCase route{2, 300, 8, 60, 2, RandomProbs(2 * 300 * 8, 34)};
  const HostTensor routed = CpuRouteSlots(route);
  const HostTensor arbitrary = Int32Tensor(Shape({2, 6, 20}), RandomSlots(2 * 6 * 20, 50, 35));
  const HostTensor hand = Int32Tensor(Shape({1, 2, 2}), {2, 0, 0, -1});

  ExpectDispatchMatches(Shape({2, 300, 37}), routed);
  ExpectDispatchMatches(Shape({2, 50, 300}), arbitrary);
  ExpectDispatchMatches(Shape({1, 3, 2}), hand);
  for (const char* op_type : {"moe_combine", "moe_dispatch_grad"}) {
    ExpectGatherMatches(op_type, 300, 37, routed);
    ExpectGatherMatches(op_type, 50, 300, arbitrary);
    ExpectGatherMatches(op_type, 3, 2, hand);
    // Width 1 and a token count that no slot reaches.
    ExpectGatherMatches(op_type, 70, 1, arbitrary);
  }
}

TEST(CudaMoeSlotsTest, EmptyCapacityAndZeroWidth) {
  LOOM_SKIP_WITHOUT_GPU();
  const HostTensor none = MakeTensor(Shape({2, 3, 0}), plan::INT32);
  ExpectDispatchMatches(Shape({2, 5, 4}), none);
  ExpectGatherMatches("moe_combine", 5, 4, none);
  ExpectGatherMatches("moe_dispatch_grad", 5, 4, none);
  ExpectRouteGradMatches(2, Shape({2, 5, 3}), RandomProbs(30, 36), none);
  const HostTensor slots = Int32Tensor(Shape({1, 2, 2}), {2, 0, 0, -1});
  ExpectDispatchMatches(Shape({1, 3, 0}), slots);
  ExpectGatherMatches("moe_combine", 3, 0, slots);
}

// Builds `call`'s CUDA kernel and runs it twice on GPU copies of the call's tensors, waiting for
// the stream after the first act; returns the second act's status.
absl::Status ComputeTwiceOnCuda(OpCall& call) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  if (!kernel.ok()) return kernel.status();
  std::vector<void*> buffers;
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  for (size_t i = 0; i < init.inputs.size(); ++i) {
    HostTensor& host = call.input(static_cast<int>(i));
    void* buffer = nullptr;
    EXPECT_EQ(cudaMalloc(&buffer, std::max<size_t>(host.bytes.size(), 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(buffer, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    buffers.push_back(buffer);
    inputs.push_back(TensorView{buffer, host.data_type, host.shape});
  }
  for (size_t i = 0; i < init.outputs.size(); ++i) {
    HostTensor& host = call.output(static_cast<int>(i));
    void* buffer = nullptr;
    EXPECT_EQ(cudaMalloc(&buffer, std::max<size_t>(host.bytes.size(), 1)), cudaSuccess);
    buffers.push_back(buffer);
    outputs.push_back(TensorView{buffer, host.data_type, host.shape});
  }
  KernelContext context{inputs, outputs, 0};
  absl::Status first = (*kernel)->Compute(context);
  EXPECT_TRUE(first.ok()) << "the act that finds a bad slot only enqueues: " << first;
  absl::Status synchronized = cuda_test::TestStream().Synchronize();
  EXPECT_TRUE(synchronized.ok()) << synchronized;
  absl::Status second = (*kernel)->Compute(context);
  synchronized = cuda_test::TestStream().Synchronize();
  EXPECT_TRUE(synchronized.ok()) << synchronized;
  for (void* buffer : buffers) cudaFree(buffer);
  return second;
}

TEST(CudaMoeSlotsTest, ABadSlotFailsTheNextActNamingIt) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall dispatch("moe_dispatch", "bad_dispatch");
  dispatch.Input(FloatTensor(Shape({1, 3, 2}), {1, 2, 3, 4, 5, 6}))
      .Input(Int32Tensor(Shape({1, 2, 1}), {0, 3}))
      .Output(Shape({1, 2, 1, 2}));
  absl::Status status = ComputeTwiceOnCuda(dispatch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_dispatch'"));
  EXPECT_THAT(status.message(), HasSubstr("moe_dispatch: slot_token[0, 1, 0] = 3"));

  OpCall grad("moe_route_grad");
  grad.Attribute("k", IntAttribute(1))
      .Input(FloatTensor(Shape({1, 2, 2}), {0.6f, 0.4f, 0.3f, 0.7f}))
      .Input(Int32Tensor(Shape({1, 2, 1}), {1, -2}))
      .Input(FloatTensor(Shape({1, 2, 1}), {1.0f, 1.0f}))
      .Output(Shape({1, 2, 2}));
  status = ComputeTwiceOnCuda(grad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("moe_route_grad: slot_token[0, 1, 0] = -2"));

  // The first bad slot in slot order is named, as on the CPU.
  OpCall combine("moe_combine");
  combine.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(Shape({2, 2, 2, 1}), RandomFloats(8, 37)))
      .Input(Int32Tensor(Shape({2, 2, 2}), {0, -1, 2, 1, 9, 0, -7, 1}))
      .Input(FloatTensor(Shape({2, 2, 2}), RandomFloats(8, 38)))
      .Output(Shape({2, 3, 1}));
  status = ComputeTwiceOnCuda(combine);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("moe_combine: slot_token[1, 0, 0] = 9"));

  OpCall good("moe_dispatch_grad");
  good.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(Shape({1, 2, 2, 2}), RandomFloats(8, 39)))
      .Input(Int32Tensor(Shape({1, 2, 2}), {2, 0, 0, -1}))
      .Output(Shape({1, 3, 2}));
  status = ComputeTwiceOnCuda(good);
  EXPECT_TRUE(status.ok()) << status;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateOnCuda(const OpCall& call) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  return cuda_test::Kernels().Create(plan::CUDA, init);
}

TEST(CudaMoeTest, BadConfigurationsAreRejectedAsOnTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall k("moe_route", "bad_route");
  BuildRoute(k, {1, 4, 3, 2, 3, RandomProbs(12, 40)});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = CreateOnCuda(k);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'bad_route'"));
  EXPECT_THAT(
      kernel.status().message(),
      HasSubstr("moe_route: attribute 'k' must be 1 or 2 and at most the 3 experts, not 3"));

  // bfloat16 probs with float32 outputs.
  OpCall mixed("moe_route");
  BuildRoute(mixed, {1, 4, 3, 2, 2, RandomProbs(12, 41)});
  KernelInit init = mixed.Init();
  init.stream = &cuda_test::TestStream();
  init.inputs[0].set_data_type(plan::BFLOAT16);
  kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);

  OpCall slots("moe_dispatch");
  slots.Input(FloatTensor(Shape({1, 3, 2}), RandomFloats(6, 42)))
      .Input(kernel_test::Int64Tensor(Shape({1, 2, 1}), {0, 1}))
      .Output(Shape({1, 2, 1, 2}));
  kernel = CreateOnCuda(slots);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("slot_token"));

  OpCall shapes("moe_combine");
  shapes.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(Shape({1, 2, 2, 2}), RandomFloats(8, 43)))
      .Input(Int32Tensor(Shape({1, 2, 2}), {2, 0, 0, -1}))
      .Input(FloatTensor(Shape({1, 2, 3}), RandomFloats(6, 44)))
      .Output(Shape({1, 3, 2}));
  kernel = CreateOnCuda(shapes);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom
