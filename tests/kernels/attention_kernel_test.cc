#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cast_kernel.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

float RoundedToBfloat16(double value) {
  return cpu::Bfloat16ToFloat32(cpu::Float32ToBfloat16(static_cast<float>(value)));
}

// softmax(q k^T * scale + causal mask) v for each of `heads` [T, Dh] matrices, with naive loops
// in double; with `bfloat16`, the probabilities and the output rounded to bfloat16 as the
// kernels do for bfloat16 tensors.
std::vector<double> ReferenceAttention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, int64_t heads, int64_t length,
                                       int64_t head_size, double scale, bool bfloat16 = false) {
  std::vector<double> output(q.size(), 0.0);
  std::vector<double> weights(length);
  for (int64_t head = 0; head < heads; ++head) {
    const int64_t base = head * length * head_size;
    for (int64_t t = 0; t < length; ++t) {
      double maximum = -INFINITY;
      for (int64_t s = 0; s < length; ++s) {
        if (s > t) {
          weights[s] = -INFINITY;
          continue;
        }
        double dot = 0.0;
        for (int64_t d = 0; d < head_size; ++d) {
          dot += static_cast<double>(q[base + t * head_size + d]) * k[base + s * head_size + d];
        }
        weights[s] = dot * scale;
        maximum = std::max(maximum, weights[s]);
      }
      double sum = 0.0;
      for (int64_t s = 0; s < length; ++s) {
        weights[s] = s > t ? 0.0 : std::exp(weights[s] - maximum);
        sum += weights[s];
      }
      for (int64_t s = 0; s < length; ++s) {
        const double probability =
            bfloat16 ? RoundedToBfloat16(weights[s] / sum) : weights[s] / sum;
        for (int64_t d = 0; d < head_size; ++d) {
          output[base + t * head_size + d] += probability * v[base + s * head_size + d];
        }
      }
    }
  }
  if (bfloat16) {
    for (double& value : output) value = RoundedToBfloat16(value);
  }
  return output;
}

void ExpectAttentionMatches(const Shape& shape, double scale, bool default_scale) {
  const int64_t count = shape.NumElements();
  const std::vector<float> q = RandomFloats(count, 71, -2.0f, 2.0f);
  const std::vector<float> k = RandomFloats(count, 72, -2.0f, 2.0f);
  const std::vector<float> v = RandomFloats(count, 73);
  OpCall call("causal_attention");
  if (!default_scale) call.Attribute("scale", FloatAttribute(scale));
  call.Input(FloatTensor(shape, q))
      .Input(FloatTensor(shape, k))
      .Input(FloatTensor(shape, v))
      .Output(shape);
  absl::Status status = call.Run();
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<double> expected =
      ReferenceAttention(q, k, v, shape.dimension(0) * shape.dimension(1), shape.dimension(2),
                         shape.dimension(3), scale);
  const std::vector<float> output = call.OutputFloats();
  for (int64_t i = 0; i < count; ++i) EXPECT_NEAR(output[i], expected[i], 2e-5) << i;
}

TEST(CausalAttentionKernelTest, MatchesNaiveReferenceWithDefaultScale) {
  ExpectAttentionMatches({2, 3, 9, 8}, 1.0 / std::sqrt(8.0), /*default_scale=*/true);
}

TEST(CausalAttentionKernelTest, MatchesNaiveReferenceWithGivenScale) {
  ExpectAttentionMatches({1, 2, 17, 5}, 0.7, /*default_scale=*/false);
  ExpectAttentionMatches({3, 1, 1, 4}, 2.0, /*default_scale=*/false);
}

TEST(CausalAttentionKernelTest, FirstPositionSeesOnlyItself) {
  const Shape shape({1, 1, 4, 2});
  const std::vector<float> v = {1, 2, 30, 40, 500, 600, 7000, 8000};
  OpCall call("causal_attention");
  call.Input(FloatTensor(shape, RandomFloats(8, 74, -50.0f, 50.0f)))
      .Input(FloatTensor(shape, RandomFloats(8, 75, -50.0f, 50.0f)))
      .Input(FloatTensor(shape, v))
      .Output(shape);
  ASSERT_TRUE(call.Run().ok());
  const std::vector<float> output = call.OutputFloats();
  EXPECT_FLOAT_EQ(output[0], 1.0f);
  EXPECT_FLOAT_EQ(output[1], 2.0f);
  for (float value : output) EXPECT_TRUE(std::isfinite(value));
}

TEST(CausalAttentionKernelTest, RejectsBadConfigurations) {
  OpCall shapes("causal_attention");
  shapes.Input(MakeTensor({1, 2, 4, 8}))
      .Input(MakeTensor({1, 2, 5, 8}))
      .Input(MakeTensor({1, 2, 4, 8}))
      .Output({1, 2, 4, 8});
  absl::Status status = shapes.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention: input 'k' has shape [1, 2, 5, 8] but q has shape "
                        "[1, 2, 4, 8]"));

  OpCall rank("causal_attention");
  rank.Input(MakeTensor({2, 4, 8}))
      .Input(MakeTensor({2, 4, 8}))
      .Input(MakeTensor({2, 4, 8}))
      .Output({2, 4, 8});
  EXPECT_THAT(rank.Build().status().message(),
              HasSubstr("causal_attention: q must have rank 4 [B, H, T, Dh], got [2, 4, 8]"));

  OpCall data_type("causal_attention");
  data_type.Input(MakeTensor({1, 1, 2, 2}))
      .Input(MakeTensor({1, 1, 2, 2}))
      .Input(MakeTensor({1, 1, 2, 2}, plan::INT32))
      .Output({1, 1, 2, 2});
  EXPECT_THAT(data_type.Build().status().message(),
              HasSubstr("causal_attention: input 'v' must be float32, got int32"));
}

TEST(CausalAttentionKernelTest, Bfloat16RoundsTheProbabilitiesAndTheOutput) {
  // q, k, v in bfloat16: float32 products and softmax, the probabilities rounded to bfloat16
  // before their product with v, the output rounded (the CUDA kernel's arithmetic).
  const Shape shape({2, 2, 13, 8});
  const int64_t count = shape.NumElements();
  std::vector<float> q;
  std::vector<float> k;
  std::vector<float> v;
  OpCall call("causal_attention");
  call.Input(Bfloat16Tensor(shape, RandomFloats(count, 71, -2.0f, 2.0f), &q))
      .Input(Bfloat16Tensor(shape, RandomFloats(count, 72, -2.0f, 2.0f), &k))
      .Input(Bfloat16Tensor(shape, RandomFloats(count, 73), &v))
      .Output(shape, plan::BFLOAT16);
  absl::Status status = call.Run();
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(call.output(0).data_type, plan::BFLOAT16);
  const std::vector<float> output = WidenedValues(call.output(0));
  const std::vector<double> expected =
      ReferenceAttention(q, k, v, 4, 13, 8, 1.0 / std::sqrt(8.0), /*bfloat16=*/true);
  // A probability within a rounding of a tie may round the other way: one bfloat16 step
  // (2^-8 relative) of slack.
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_NEAR(output[i], expected[i], std::ldexp(std::fabs(expected[i]), -8) + 1e-6)
        << "element " << i;
  }
}

TEST(CausalAttentionKernelTest, RejectsMixedDataTypes) {
  OpCall mixed("causal_attention");
  mixed.Input(MakeTensor({1, 1, 2, 2}, plan::BFLOAT16))
      .Input(MakeTensor({1, 1, 2, 2}, plan::BFLOAT16))
      .Input(MakeTensor({1, 1, 2, 2}))
      .Output({1, 1, 2, 2}, plan::BFLOAT16);
  EXPECT_THAT(mixed.Build().status().message(),
              HasSubstr("causal_attention: input 'v' must be bfloat16, got float32"));
}

}  // namespace
}  // namespace loom::kernel_test
