// The CUDA layout kernels (transpose, slice, pad, concat) against the CPU kernels: every element
// size, tiled transposes of sizes that are not multiples of the tile, vectorised row copies, and
// the CPU's build-time errors.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::FloatTensor;
using kernel_test::IntAttribute;
using kernel_test::IntListAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

// A tensor of `data_type` whose bytes are distinct-ish (i * 7 + 3 per byte, wrapping).
HostTensor PatternTensor(const Shape& shape, plan::DataType data_type, int seed) {
  HostTensor tensor = MakeTensor(shape, data_type);
  for (size_t i = 0; i < tensor.bytes.size(); ++i) {
    tensor.bytes[i] = static_cast<std::byte>((i * 7 + 3 + seed * 13) & 0xff);
  }
  return tensor;
}

Shape Permuted(const Shape& shape, const std::vector<int64_t>& permutation) {
  Shape result = shape;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    result.set_dimension(axis, shape.dimension(permutation[axis]));
  }
  return result;
}

// Builds the call twice (float32, then a fresh one run as bfloat16) and compares both with the
// CPU kernel exactly: the kernels only move elements.
void ExpectFloatTypesMatch(const std::string& op_type, const std::function<void(OpCall&)>& build) {
  {
    SCOPED_TRACE("float32");
    OpCall call(op_type);
    build(call);
    cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
  }
  {
    SCOPED_TRACE("bfloat16");
    OpCall call(op_type);
    build(call);
    cuda_test::ExpectCudaMatchesCpu(call, 0.0f, plan::BFLOAT16);
  }
}

void ExpectTransposeMatches(const Shape& shape, const std::vector<int64_t>& permutation) {
  SCOPED_TRACE(shape.ToString() + " permutation " + ::testing::PrintToString(permutation));
  ExpectFloatTypesMatch("transpose", [&](OpCall& call) {
    call.Attribute("permutation", IntListAttribute(permutation))
        .Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 1)))
        .Output(Permuted(shape, permutation));
  });
}

void ExpectTypedTransposeMatches(const Shape& shape, const std::vector<int64_t>& permutation,
                                 plan::DataType data_type) {
  SCOPED_TRACE(shape.ToString() + " permutation " + ::testing::PrintToString(permutation));
  OpCall call("transpose");
  call.Attribute("permutation", IntListAttribute(permutation))
      .Input(PatternTensor(shape, data_type, 1))
      .Output(Permuted(shape, permutation), data_type);
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaTransposeTest, TwoDimensionalIncludingPartialTiles) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectTransposeMatches({3, 5}, {1, 0});
  ExpectTransposeMatches({3, 5}, {0, 1});
  ExpectTransposeMatches({1, 7}, {1, 0});
  ExpectTransposeMatches({37, 45}, {1, 0});
  ExpectTransposeMatches({300, 701}, {1, 0});
}

TEST(CudaTransposeTest, EveryThreeDimensionalPermutation) {
  LOOM_SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int64_t>> permutations = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                                          {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const std::vector<int64_t>& permutation : permutations) {
    ExpectTransposeMatches({2, 3, 4}, permutation);
    ExpectTransposeMatches({33, 5, 65}, permutation);
    ExpectTypedTransposeMatches({5, 1, 3}, permutation, plan::INT32);
  }
}

TEST(CudaTransposeTest, FourDimensionalAndAttentionSized) {
  LOOM_SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int64_t>> permutations = {
      {0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
  for (const std::vector<int64_t>& permutation : permutations) {
    ExpectTransposeMatches({3, 4, 5, 6}, permutation);
    ExpectTransposeMatches({2, 7, 33, 40}, permutation);
  }
  // [batch, heads, time, head size] <-> [batch, time, heads, head size], and the key transpose.
  ExpectTransposeMatches({16, 8, 64, 32}, {0, 2, 1, 3});
  ExpectTransposeMatches({16, 8, 64, 32}, {0, 1, 3, 2});
}

TEST(CudaTransposeTest, EveryElementSize) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectTypedTransposeMatches({3, 4, 5}, {2, 0, 1}, plan::UINT8);
  ExpectTypedTransposeMatches({35, 4, 37}, {2, 1, 0}, plan::UINT8);
  ExpectTypedTransposeMatches({3, 4, 5}, {1, 2, 0}, plan::UINT16);
  ExpectTypedTransposeMatches({33, 34, 5}, {1, 0, 2}, plan::INT32);
  ExpectTypedTransposeMatches({3, 4, 5}, {2, 1, 0}, plan::INT64);
  ExpectTypedTransposeMatches({40, 3, 70}, {2, 1, 0}, plan::INT64);
}

TEST(CudaTransposeTest, ScalarAndEmpty) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectTransposeMatches({}, {});
  ExpectTransposeMatches({2, 0, 3}, {2, 1, 0});
}

struct Window {
  Shape shape;
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
};

Shape Selected(const Window& window) {
  Shape sliced = window.shape;
  for (int axis = 0; axis < sliced.rank(); ++axis) {
    sliced.set_dimension(axis, window.end[axis] - window.begin[axis]);
  }
  return sliced;
}

const std::vector<Window>& Windows() {
  static const auto* windows = new std::vector<Window>{
      {{4, 5, 6}, {1, 0, 2}, {3, 5, 5}},
      {{4, 5, 6}, {0, 0, 0}, {4, 5, 6}},
      {{4, 5, 6}, {3, 4, 5}, {4, 5, 6}},
      {{4, 5, 6}, {0, 2, 0}, {4, 3, 6}},
      {{4, 5, 6}, {2, 1, 3}, {2, 4, 6}},
      // Long rows, some of whole 16-byte units and some not.
      {{37, 300}, {3, 4}, {30, 296}},
      {{37, 300}, {3, 1}, {30, 298}},
      {{5, 3, 1030}, {1, 0, 0}, {4, 3, 1030}},
      {{9}, {2}, {7}},
  };
  return *windows;
}

TEST(CudaSliceTest, MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const Window& window : Windows()) {
    SCOPED_TRACE(window.shape.ToString() + " begin " + ::testing::PrintToString(window.begin));
    ExpectFloatTypesMatch("slice", [&](OpCall& call) {
      call.Attribute("begin", IntListAttribute(window.begin))
          .Attribute("end", IntListAttribute(window.end))
          .Input(FloatTensor(window.shape, RandomFloats(window.shape.NumElements(), 11)))
          .Output(Selected(window));
    });
  }
}

TEST(CudaSliceTest, IntegerElements) {
  LOOM_SKIP_WITHOUT_GPU();
  for (plan::DataType data_type : {plan::INT32, plan::INT64, plan::UINT8}) {
    for (const Window& window : Windows()) {
      SCOPED_TRACE(window.shape.ToString() + " begin " + ::testing::PrintToString(window.begin));
      OpCall call("slice");
      call.Attribute("begin", IntListAttribute(window.begin))
          .Attribute("end", IntListAttribute(window.end))
          .Input(PatternTensor(window.shape, data_type, 2))
          .Output(Selected(window), data_type);
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaPadTest, MatchesTheCpuKernelAndZeroesTheRest) {
  LOOM_SKIP_WITHOUT_GPU();
  // The outputs start as garbage on the GPU (RunOnCuda), so the zeros are checked too.
  for (const Window& window : Windows()) {
    SCOPED_TRACE(window.shape.ToString() + " begin " + ::testing::PrintToString(window.begin));
    const Shape part = Selected(window);
    ExpectFloatTypesMatch("pad", [&](OpCall& call) {
      call.Attribute("begin", IntListAttribute(window.begin))
          .Input(FloatTensor(part, RandomFloats(part.NumElements(), 12)))
          .Output(window.shape);
    });
    OpCall integers("pad");
    integers.Attribute("begin", IntListAttribute(window.begin))
        .Input(PatternTensor(part, plan::INT64, 3))
        .Output(window.shape, plan::INT64);
    cuda_test::ExpectCudaMatchesCpu(integers, 0.0f);
  }
}

TEST(CudaConcatTest, FloatInputsOnEveryAxis) {
  LOOM_SKIP_WITHOUT_GPU();
  struct Case {
    std::vector<Shape> inputs;
    int64_t axis;
    Shape output;
  };
  const std::vector<Case> cases = {
      {{{2, 1, 3}, {2, 4, 3}, {2, 2, 3}}, 1, {2, 7, 3}},
      {{{2, 1}, {2, 2}}, -1, {2, 3}},
      {{{3, 5}, {4, 5}}, 0, {7, 5}},
      {{{33, 130}, {33, 1}, {33, 257}}, 1, {33, 388}},
      {{{33, 128}, {33, 64}}, -1, {33, 192}},
      {{{5, 0, 3}, {5, 300, 3}, {5, 17, 3}}, 1, {5, 317, 3}},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.output.ToString());
    ExpectFloatTypesMatch("concat", [&](OpCall& call) {
      call.Attribute("axis", IntAttribute(test_case.axis));
      for (size_t index = 0; index < test_case.inputs.size(); ++index) {
        const Shape& shape = test_case.inputs[index];
        call.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 20 + index)));
      }
      call.Output(test_case.output);
    });
  }
}

TEST(CudaConcatTest, IntegerInputsWithAnEmptyOne) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall first("concat");
  first.Attribute("axis", IntAttribute(0))
      .Input(kernel_test::Int32Tensor({1, 2}, {1, 2}))
      .Input(kernel_test::Int32Tensor({0, 2}, {}))
      .Input(kernel_test::Int32Tensor({2, 2}, {3, 4, 5, 6}))
      .Output({3, 2}, plan::INT32);
  cuda_test::ExpectCudaMatchesCpu(first, 0.0f);

  OpCall wide("concat");
  wide.Attribute("axis", IntAttribute(1))
      .Input(PatternTensor({7, 3, 5}, plan::INT64, 4))
      .Input(PatternTensor({7, 9, 5}, plan::INT64, 5))
      .Output({7, 12, 5}, plan::INT64);
  cuda_test::ExpectCudaMatchesCpu(wide, 0.0f);

  OpCall bytes("concat");
  bytes.Attribute("axis", IntAttribute(-1))
      .Input(PatternTensor({7, 3}, plan::UINT8, 6))
      .Input(PatternTensor({7, 29}, plan::UINT8, 7))
      .Output({7, 32}, plan::UINT8);
  cuda_test::ExpectCudaMatchesCpu(bytes, 0.0f);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateOnCuda(const OpCall& call) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  return cuda_test::Kernels().Create(plan::CUDA, init);
}

TEST(CudaLayoutTest, BadConfigurationsAreRejectedAsOnTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall permutation("transpose", "bad_transpose");
  permutation.Attribute("permutation", IntListAttribute({0, 0, 1}))
      .Input(MakeTensor({2, 3, 4}))
      .Output({2, 3, 4});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = CreateOnCuda(permutation);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'bad_transpose'"));
  EXPECT_THAT(kernel.status().message(),
              HasSubstr("transpose: attribute 'permutation' [0, 0, 1] is not a permutation of the "
                        "axes of [2, 3, 4]"));

  OpCall pad("pad");
  pad.Attribute("begin", IntListAttribute({0, 2})).Input(MakeTensor({2, 3})).Output({2, 4});
  kernel = CreateOnCuda(pad);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("pad: input [2, 3] placed at begin [0, 2] does "
                                                   "not fit in output [2, 4] (axis 1)"));

  OpCall slice("slice");
  slice.Attribute("begin", IntListAttribute({0, 2}))
      .Attribute("end", IntListAttribute({2, 5}))
      .Input(MakeTensor({2, 4}))
      .Output({2, 3});
  kernel = CreateOnCuda(slice);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);

  OpCall types("concat");
  types.Attribute("axis", IntAttribute(0))
      .Input(MakeTensor({2}))
      .Input(MakeTensor({2}, plan::INT32))
      .Output({4});
  kernel = CreateOnCuda(types);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("concat: input 1 must be float32, got int32"));

  OpCall untyped("transpose");
  untyped.Attribute("permutation", IntListAttribute({0}))
      .Input(MakeTensor({2}, plan::DATA_TYPE_UNSPECIFIED))
      .Output({2}, plan::DATA_TYPE_UNSPECIFIED);
  kernel = CreateOnCuda(untyped);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaLayoutTest, AKernelOnACpuStreamIsRefused) {
  // No GPU needed: the factory looks at the stream before touching CUDA.
  OpCall call("transpose", "misplaced");
  call.Attribute("permutation", IntListAttribute({1, 0})).Input(MakeTensor({2, 3})).Output({3, 2});
  SynchronousStreamContext cpu_stream;
  KernelInit init = call.Init();
  init.stream = &cpu_stream;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'misplaced'"));
}

}  // namespace
}  // namespace loom
