#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

template <typename T>
HostTensor TypedTensor(const Shape& shape, plan::DataType data_type, const std::vector<T>& values) {
  HostTensor tensor = MakeTensor(shape, data_type);
  if (!tensor.bytes.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

template <typename T>
std::vector<T> Values(const HostTensor& tensor) {
  absl::Span<const T> values = tensor.Values<T>();
  return std::vector<T>(values.begin(), values.end());
}

// Distinct-ish values for element i (wrapping for narrow types).
template <typename T>
std::vector<T> Iota(int64_t count) {
  std::vector<T> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(i * 7 + 3);
  return values;
}

// The multi-index of flat index `flat` in `shape`.
std::vector<int64_t> Unravel(const Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.rank());
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    index[axis] = flat % shape.dimension(axis);
    flat /= shape.dimension(axis);
  }
  return index;
}

int64_t Ravel(const Shape& shape, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (int axis = 0; axis < shape.rank(); ++axis) flat = flat * shape.dimension(axis) + index[axis];
  return flat;
}

Shape Permuted(const Shape& shape, const std::vector<int64_t>& permutation) {
  Shape result = shape;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    result.set_dimension(axis, shape.dimension(permutation[axis]));
  }
  return result;
}

template <typename T>
std::vector<T> ReferenceTranspose(const std::vector<T>& input, const Shape& shape,
                                  const std::vector<int64_t>& permutation) {
  const Shape output_shape = Permuted(shape, permutation);
  std::vector<T> output(input.size());
  for (int64_t flat = 0; flat < output_shape.NumElements(); ++flat) {
    const std::vector<int64_t> out_index = Unravel(output_shape, flat);
    std::vector<int64_t> in_index(shape.rank());
    for (int axis = 0; axis < shape.rank(); ++axis) in_index[permutation[axis]] = out_index[axis];
    output[flat] = input[Ravel(shape, in_index)];
  }
  return output;
}

template <typename T>
void ExpectTransposeMatches(const Shape& shape, const std::vector<int64_t>& permutation,
                            plan::DataType data_type) {
  const std::vector<T> input = Iota<T>(shape.NumElements());
  OpCall call("transpose");
  call.Attribute("permutation", IntListAttribute(permutation))
      .Input(TypedTensor(shape, data_type, input))
      .Output(Permuted(shape, permutation), data_type);
  absl::Status status = call.Run();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(Values<T>(call.output(0)), ReferenceTranspose(input, shape, permutation))
      << shape.ToString() << " permutation " << ::testing::PrintToString(permutation);
}

TEST(TransposeKernelTest, TwoDimensional) {
  ExpectTransposeMatches<float>({3, 5}, {1, 0}, plan::FLOAT32);
  ExpectTransposeMatches<float>({3, 5}, {0, 1}, plan::FLOAT32);
  ExpectTransposeMatches<float>({1, 7}, {1, 0}, plan::FLOAT32);
}

TEST(TransposeKernelTest, EveryThreeDimensionalPermutation) {
  const std::vector<std::vector<int64_t>> permutations = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                                          {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const std::vector<int64_t>& permutation : permutations) {
    ExpectTransposeMatches<float>({2, 3, 4}, permutation, plan::FLOAT32);
    ExpectTransposeMatches<int32_t>({5, 1, 3}, permutation, plan::INT32);
  }
}

TEST(TransposeKernelTest, FourDimensional) {
  const std::vector<std::vector<int64_t>> permutations = {
      {0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
  for (const std::vector<int64_t>& permutation : permutations) {
    ExpectTransposeMatches<float>({3, 4, 5, 6}, permutation, plan::FLOAT32);
  }
}

TEST(TransposeKernelTest, EveryElementSize) {
  ExpectTransposeMatches<uint8_t>({3, 4, 5}, {2, 0, 1}, plan::UINT8);
  ExpectTransposeMatches<uint16_t>({3, 4, 5}, {1, 2, 0}, plan::BFLOAT16);
  ExpectTransposeMatches<int64_t>({3, 4, 5}, {2, 1, 0}, plan::INT64);
}

TEST(TransposeKernelTest, AttentionHeadSizedTensor) {
  // [batch, heads, time, head size] <-> [batch, time, heads, head size], and the key transpose.
  ExpectTransposeMatches<float>({64, 8, 64, 32}, {0, 2, 1, 3}, plan::FLOAT32);
  ExpectTransposeMatches<float>({64, 8, 64, 32}, {0, 1, 3, 2}, plan::FLOAT32);
}

TEST(TransposeKernelTest, ScalarAndEmpty) {
  ExpectTransposeMatches<float>({}, {}, plan::FLOAT32);
  ExpectTransposeMatches<float>({2, 0, 3}, {2, 1, 0}, plan::FLOAT32);
}

TEST(TransposeKernelTest, RejectsBadPermutation) {
  for (const std::vector<int64_t>& permutation :
       std::vector<std::vector<int64_t>>{{0, 0, 1}, {0, 1, 3}, {-1, 0, 1}}) {
    OpCall call("transpose", "t0");
    call.Attribute("permutation", IntListAttribute(permutation))
        .Input(MakeTensor({2, 3, 4}))
        .Output({2, 3, 4});
    absl::Status status = call.Build().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("transpose: attribute 'permutation' [" +
                                            absl::StrJoin(permutation, ", ") +
                                            "] is not a permutation of the axes of [2, 3, 4]"));
  }
  OpCall short_list("transpose");
  short_list.Attribute("permutation", IntListAttribute({1, 0}))
      .Input(MakeTensor({2, 3, 4}))
      .Output({3, 2, 4});
  EXPECT_THAT(
      short_list.Build().status().message(),
      HasSubstr("transpose: attribute 'permutation' has 2 entries but the input has rank 3"));

  OpCall missing("transpose", "t1");
  missing.Input(MakeTensor({2, 3})).Output({3, 2});
  EXPECT_EQ(missing.Build().status().message(),
            "task 't1' (op 'transpose'): transpose: missing attribute 'permutation'");
}

TEST(TransposeKernelTest, RejectsWrongOutputShapeAndDataType) {
  OpCall shape("transpose");
  shape.Attribute("permutation", IntListAttribute({1, 0})).Input(MakeTensor({2, 3})).Output({2, 3});
  EXPECT_THAT(shape.Build().status().message(),
              HasSubstr("transpose: output has shape [2, 3] but input [2, 3] permuted by [1, 0] "
                        "is [3, 2]"));

  OpCall data_type("transpose");
  data_type.Attribute("permutation", IntListAttribute({1, 0}))
      .Input(MakeTensor({2, 3}))
      .Output({3, 2}, plan::INT32);
  EXPECT_THAT(data_type.Build().status().message(),
              HasSubstr("transpose: output 0 must be float32, got int32"));

  OpCall untyped("transpose");
  untyped.Attribute("permutation", IntListAttribute({0}))
      .Input(MakeTensor({2}, plan::DATA_TYPE_UNSPECIFIED))
      .Output({2}, plan::DATA_TYPE_UNSPECIFIED);
  EXPECT_THAT(untyped.Build().status().message(),
              HasSubstr("transpose: input has no data type (unspecified)"));
}

TEST(ReshapeKernelTest, CopiesBytes) {
  const std::vector<float> input = RandomFloats(24, 3);
  OpCall call("reshape");
  call.Input(FloatTensor({2, 3, 4}, input)).Output({6, 4});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_EQ(call.OutputFloats(), input);

  const std::vector<int64_t> ids = {1, -2, 3, int64_t{1} << 40, 5, 6};
  OpCall integers("reshape");
  integers.Input(Int64Tensor({6}, ids)).Output({3, 1, 2}, plan::INT64);
  ASSERT_TRUE(integers.Run().ok());
  EXPECT_EQ(Values<int64_t>(integers.output(0)), ids);
}

TEST(ReshapeKernelTest, RejectsDifferentElementCountOrType) {
  OpCall count("reshape");
  count.Input(MakeTensor({2, 3})).Output({7});
  absl::Status status = count.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("reshape: output [7] has 7 elements but input [2, 3] has 6"));

  OpCall data_type("reshape");
  data_type.Input(MakeTensor({6}, plan::INT32)).Output({2, 3}, plan::INT64);
  EXPECT_THAT(data_type.Build().status().message(),
              HasSubstr("reshape: output 0 must be int32, got int64"));
}

// input[begin:end] by the definition.
template <typename T>
std::vector<T> ReferenceSlice(const std::vector<T>& input, const Shape& shape,
                              const std::vector<int64_t>& begin, const Shape& output_shape) {
  std::vector<T> output(output_shape.NumElements());
  for (int64_t flat = 0; flat < output_shape.NumElements(); ++flat) {
    std::vector<int64_t> index = Unravel(output_shape, flat);
    for (int axis = 0; axis < shape.rank(); ++axis) index[axis] += begin[axis];
    output[flat] = input[Ravel(shape, index)];
  }
  return output;
}

TEST(SliceKernelTest, MatchesReferenceAndPadRoundTrips) {
  const Shape shape({4, 5, 6});
  const std::vector<float> input = RandomFloats(shape.NumElements(), 11);
  struct Window {
    std::vector<int64_t> begin;
    std::vector<int64_t> end;
  };
  const std::vector<Window> windows = {{{1, 0, 2}, {3, 5, 5}},
                                       {{0, 0, 0}, {4, 5, 6}},
                                       {{3, 4, 5}, {4, 5, 6}},
                                       {{0, 2, 0}, {4, 3, 6}},
                                       {{2, 1, 3}, {2, 4, 6}}};
  for (const Window& window : windows) {
    Shape sliced = shape;
    for (int axis = 0; axis < 3; ++axis) {
      sliced.set_dimension(axis, window.end[axis] - window.begin[axis]);
    }
    OpCall slice("slice");
    slice.Attribute("begin", IntListAttribute(window.begin))
        .Attribute("end", IntListAttribute(window.end))
        .Input(FloatTensor(shape, input))
        .Output(sliced);
    absl::Status status = slice.Run();
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<float> part = slice.OutputFloats();
    EXPECT_EQ(part, ReferenceSlice(input, shape, window.begin, sliced)) << sliced.ToString();

    OpCall pad("pad");
    pad.Attribute("begin", IntListAttribute(window.begin))
        .Input(FloatTensor(sliced, part))
        .Output(shape);
    // Stale bytes in the output must be overwritten with zeros.
    for (std::byte& byte : pad.output(0).bytes) byte = std::byte{0x7f};
    status = pad.Run();
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<float> padded = pad.OutputFloats();
    for (int64_t flat = 0; flat < shape.NumElements(); ++flat) {
      const std::vector<int64_t> index = Unravel(shape, flat);
      bool inside = true;
      for (int axis = 0; axis < 3; ++axis) {
        inside = inside && index[axis] >= window.begin[axis] && index[axis] < window.end[axis];
      }
      ASSERT_EQ(padded[flat], inside ? input[flat] : 0.0f) << "element " << flat;
    }
  }
}

TEST(SliceKernelTest, IntegerElementsAndRankOne) {
  OpCall call("slice");
  call.Attribute("begin", IntListAttribute({2}))
      .Attribute("end", IntListAttribute({5}))
      .Input(Int64Tensor({6}, {10, 11, 12, 13, 14, 15}))
      .Output({3}, plan::INT64);
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.output(0).Values<int64_t>(), ::testing::ElementsAre(12, 13, 14));
}

TEST(SliceKernelTest, RejectsOutOfBoundsAndWrongOutput) {
  OpCall bounds("slice");
  bounds.Attribute("begin", IntListAttribute({0, 2}))
      .Attribute("end", IntListAttribute({2, 5}))
      .Input(MakeTensor({2, 4}))
      .Output({2, 3});
  EXPECT_THAT(bounds.Build().status().message(),
              HasSubstr("slice: axis 1 range [2, 5) (begin [0, 2], end [2, 5]) is not within "
                        "input [2, 4]"));

  OpCall inverted("slice");
  inverted.Attribute("begin", IntListAttribute({3}))
      .Attribute("end", IntListAttribute({2}))
      .Input(MakeTensor({4}))
      .Output({0});
  EXPECT_THAT(inverted.Build().status().message(), HasSubstr("axis 0 range [3, 2)"));

  OpCall output("slice");
  output.Attribute("begin", IntListAttribute({0, 1}))
      .Attribute("end", IntListAttribute({2, 3}))
      .Input(MakeTensor({2, 4}))
      .Output({2, 3});
  EXPECT_THAT(output.Build().status().message(),
              HasSubstr("slice: output has shape [2, 3] but begin [0, 1] and end [2, 3] select "
                        "[2, 2]"));

  OpCall missing_end("slice");
  missing_end.Attribute("begin", IntListAttribute({0})).Input(MakeTensor({4})).Output({4});
  EXPECT_THAT(missing_end.Build().status().message(), HasSubstr("slice: missing attribute 'end'"));
}

TEST(PadKernelTest, IntegerElements) {
  OpCall call("pad");
  call.Attribute("begin", IntListAttribute({1, 0}))
      .Input(Int32Tensor({1, 2}, {7, 8}))
      .Output({3, 3}, plan::INT32);
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.output(0).Values<int32_t>(), ::testing::ElementsAre(0, 0, 0, 7, 8, 0, 0, 0, 0));
}

TEST(PadKernelTest, RejectsWindowOutsideOutput) {
  OpCall call("pad");
  call.Attribute("begin", IntListAttribute({0, 2})).Input(MakeTensor({2, 3})).Output({2, 4});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("pad: input [2, 3] placed at begin [0, 2] does not fit "
                                          "in output [2, 4] (axis 1)"));

  OpCall rank("pad");
  rank.Attribute("begin", IntListAttribute({0})).Input(MakeTensor({2})).Output({2, 1});
  EXPECT_THAT(rank.Build().status().message(),
              HasSubstr("pad: output [2, 1] and input [2] differ in rank"));
}

TEST(ConcatKernelTest, ThreeInputsOnMiddleAxis) {
  const std::vector<Shape> shapes = {{2, 1, 3}, {2, 4, 3}, {2, 2, 3}};
  std::vector<std::vector<float>> inputs;
  OpCall call("concat");
  call.Attribute("axis", IntAttribute(1));
  for (size_t index = 0; index < shapes.size(); ++index) {
    inputs.push_back(RandomFloats(shapes[index].NumElements(), 20 + index));
    call.Input(FloatTensor(shapes[index], inputs.back()));
  }
  call.Output({2, 7, 3});
  absl::Status status = call.Run();
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<float> output = call.OutputFloats();
  // Naive: output[a, b, c] comes from the input whose range along axis 1 holds b.
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 7; ++b) {
      int64_t index = 0;
      int64_t local = b;
      while (local >= shapes[index].dimension(1)) {
        local -= shapes[index].dimension(1);
        ++index;
      }
      for (int64_t c = 0; c < 3; ++c) {
        const float expected = inputs[index][(a * shapes[index].dimension(1) + local) * 3 + c];
        EXPECT_EQ(output[(a * 7 + b) * 3 + c], expected) << a << ", " << b << ", " << c;
      }
    }
  }
}

TEST(ConcatKernelTest, FirstAndNegativeLastAxisAndEmptyInput) {
  OpCall first("concat");
  first.Attribute("axis", IntAttribute(0))
      .Input(Int32Tensor({1, 2}, {1, 2}))
      .Input(Int32Tensor({0, 2}, {}))
      .Input(Int32Tensor({2, 2}, {3, 4, 5, 6}))
      .Output({3, 2}, plan::INT32);
  ASSERT_TRUE(first.Run().ok());
  EXPECT_THAT(first.output(0).Values<int32_t>(), ::testing::ElementsAre(1, 2, 3, 4, 5, 6));

  OpCall last("concat");
  last.Attribute("axis", IntAttribute(-1))
      .Input(FloatTensor({2, 1}, {1, 2}))
      .Input(FloatTensor({2, 2}, {3, 4, 5, 6}))
      .Output({2, 3});
  ASSERT_TRUE(last.Run().ok());
  EXPECT_THAT(last.OutputFloats(), ::testing::ElementsAre(1, 3, 4, 2, 5, 6));
}

TEST(ConcatKernelTest, RejectsMismatchedShapesAndTypes) {
  OpCall shapes("concat");
  shapes.Attribute("axis", IntAttribute(1))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3, 3}))
      .Output({2, 6});
  absl::Status status = shapes.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("concat: input 1 has shape [3, 3] but the output [2, 6] needs every "
                        "dimension other than axis 1 to match"));

  OpCall total("concat");
  total.Attribute("axis", IntAttribute(1))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 5});
  EXPECT_THAT(total.Build().status().message(),
              HasSubstr("concat: the inputs add up to 6 along axis 1 but the output [2, 5] has 5"));

  OpCall types("concat");
  types.Attribute("axis", IntAttribute(0))
      .Input(MakeTensor({2}))
      .Input(MakeTensor({2}, plan::INT32))
      .Output({4});
  EXPECT_THAT(types.Build().status().message(),
              HasSubstr("concat: input 1 must be float32, got int32"));

  OpCall axis("concat");
  axis.Attribute("axis", IntAttribute(2)).Input(MakeTensor({2, 3})).Output({2, 3});
  EXPECT_THAT(axis.Build().status().message(),
              HasSubstr("concat: attribute 'axis' is 2 but the output [2, 3] has rank 2"));

  OpCall none("concat");
  none.Attribute("axis", IntAttribute(0)).Output({2});
  EXPECT_THAT(
      none.Build().status().message(),
      HasSubstr("concat: expects at least 1 input and 1 output, got 0 inputs and 1 output"));
}

}  // namespace
}  // namespace loom::kernel_test
