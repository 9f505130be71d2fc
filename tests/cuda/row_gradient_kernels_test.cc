#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using cuda_test::BuildOnCuda;
using cuda_test::ComputeThriceOnCuda;
using cuda_test::IndexTensor;
using cuda_test::RandomIndices;
using cuda_test::RowLengths;
using kernel_test::FloatAttribute;
using kernel_test::FloatTensor;
using kernel_test::Int32Tensor;
using kernel_test::Int64Tensor;
using kernel_test::IntAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

constexpr float kFloat32Tolerance = 1e-5f;
constexpr float kBfloat16Tolerance = 2e-2f;

// ---------------------------------------------------------------------------------------------
// softmax_grad and log_softmax_grad.

// y is the forward's output on random x, as in the CPU tests.
void ExpectRowGradMatches(const std::string& forward_op, const std::string& grad_op,
                          const Shape& shape, plan::DataType data_type, float tolerance) {
  OpCall forward(forward_op);
  forward.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 21, -3.0f, 3.0f)))
      .Output(shape);
  ASSERT_TRUE(forward.Run().ok());
  OpCall grad(grad_op);
  grad.Input(FloatTensor(shape, forward.OutputFloats()))
      .Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 22, -2.0f, 2.0f)))
      .Output(shape);
  cuda_test::ExpectCudaMatchesCpu(grad, tolerance, data_type);
}

TEST(CudaSoftmaxGradTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int64_t n : RowLengths()) {
      for (const Shape& shape : {Shape({n}), Shape({3, n}), Shape({2, 5, n})}) {
        SCOPED_TRACE(std::string(op) + "_grad " + shape.ToString());
        ExpectRowGradMatches(op, std::string(op) + "_grad", shape, plan::FLOAT32,
                             kFloat32Tolerance);
      }
    }
  }
}

TEST(CudaSoftmaxGradTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int64_t n : RowLengths()) {
      for (const Shape& shape : {Shape({n}), Shape({3, n}), Shape({2, 5, n})}) {
        SCOPED_TRACE(std::string(op) + "_grad " + shape.ToString());
        ExpectRowGradMatches(op, std::string(op) + "_grad", shape, plan::BFLOAT16,
                             kBfloat16Tolerance);
      }
    }
  }
}

TEST(CudaSoftmaxGradTest, ManyShortRowsAndEmptyRows) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectRowGradMatches("softmax", "softmax_grad", Shape({4099, 3}), plan::FLOAT32,
                       kFloat32Tolerance);
  ExpectRowGradMatches("log_softmax", "log_softmax_grad", Shape({4099, 3}), plan::BFLOAT16,
                       kBfloat16Tolerance);
  OpCall empty("softmax_grad");
  empty.Input(MakeTensor({3, 0})).Input(MakeTensor({3, 0})).Output({3, 0});
  cuda_test::ExpectCudaMatchesCpu(empty, 0.0f);
  OpCall no_rows("log_softmax_grad");
  no_rows.Input(MakeTensor({0, 5})).Input(MakeTensor({0, 5})).Output({0, 5});
  cuda_test::ExpectCudaMatchesCpu(no_rows, 0.0f);
}

TEST(CudaSoftmaxGradTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall scalar("softmax_grad", "bad_softmax_grad");
  scalar.Input(MakeTensor({})).Input(MakeTensor({})).Output({});
  absl::Status status = BuildOnCuda(scalar);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_softmax_grad'"));
  EXPECT_THAT(status.message(),
              HasSubstr("softmax_grad: input 'y' must have rank >= 1, got a scalar"));

  OpCall mismatch("log_softmax_grad");
  mismatch.Input(MakeTensor({2, 5})).Input(MakeTensor({2, 4})).Output({2, 5});
  status = BuildOnCuda(mismatch, plan::BFLOAT16);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("log_softmax_grad: input 'dy' has shape [2, 4]"));

  // Mixed float types, and types the kernel does not compute on.
  OpCall mixed("softmax_grad", "mixed");
  mixed.Input(MakeTensor({2, 5})).Input(MakeTensor({2, 5})).Output({2, 5});
  KernelInit init = mixed.Init();
  init.stream = &cuda_test::TestStream();
  init.inputs[1].set_data_type(plan::BFLOAT16);
  status = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'mixed'"));
  init = mixed.Init();
  init.stream = &cuda_test::TestStream();
  init.inputs[0].set_data_type(plan::INT32);
  status = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'mixed'"));
}

TEST(CudaSoftmaxGradTest, AKernelOnACpuStreamIsRefused) {
  // No GPU needed: the factory looks at the stream before touching CUDA.
  OpCall call("softmax_grad", "misplaced");
  call.Input(MakeTensor({2, 3})).Input(MakeTensor({2, 3})).Output({2, 3});
  SynchronousStreamContext cpu_stream;
  KernelInit init = call.Init();
  init.stream = &cpu_stream;
  absl::Status status = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("task 'misplaced'"));
}

// ---------------------------------------------------------------------------------------------
// layer_norm_grad.

// Inputs as in the CPU tests; `epsilon` < 0 leaves the attribute out.
void ExpectLayerNormGradMatches(const Shape& shape, double epsilon, plan::DataType data_type,
                                float tolerance) {
  const int64_t n = shape.dimension(shape.rank() - 1);
  OpCall grad("layer_norm_grad");
  if (epsilon >= 0.0) grad.Attribute("epsilon", FloatAttribute(epsilon));
  grad.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 51, -1.0f, 5.0f)))
      .Input(FloatTensor({n}, RandomFloats(n, 52, 0.5f, 1.5f)))
      .Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 54, -2.0f, 2.0f)))
      .Output(shape)
      .Output({n})
      .Output({n});
  cuda_test::ExpectCudaMatchesCpu(grad, tolerance, data_type);
}

const std::vector<Shape>& LayerNormShapes() {
  static const auto* shapes = [] {
    auto* made = new std::vector<Shape>;
    for (int64_t n : RowLengths()) {
      made->push_back(Shape({n}));
      made->push_back(Shape({2, 3, n}));
      made->push_back(Shape({37, n}));
    }
    // Many rows: several chunks of column partial sums, the last one short.
    made->push_back(Shape({1000, 7}));
    made->push_back(Shape({1029, 33}));
    made->push_back(Shape({300, 1000}));
    return made;
  }();
  return *shapes;
}

TEST(CudaLayerNormGradTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const Shape& shape : LayerNormShapes()) {
    SCOPED_TRACE(shape.ToString());
    ExpectLayerNormGradMatches(shape, -1.0, plan::FLOAT32, kFloat32Tolerance);
  }
  ExpectLayerNormGradMatches(Shape({4, 5}), 0.5, plan::FLOAT32, kFloat32Tolerance);
}

TEST(CudaLayerNormGradTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const Shape& shape : LayerNormShapes()) {
    SCOPED_TRACE(shape.ToString());
    ExpectLayerNormGradMatches(shape, -1.0, plan::BFLOAT16, kBfloat16Tolerance);
  }
  ExpectLayerNormGradMatches(Shape({4, 5}), 0.5, plan::BFLOAT16, kBfloat16Tolerance);
}

TEST(CudaLayerNormGradTest, NoRowsGivesZeroParameterGradients) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall grad("layer_norm_grad");
  grad.Input(MakeTensor({0, 3}))
      .Input(FloatTensor({3}, {1.0f, 2.0f, 3.0f}))
      .Input(MakeTensor({0, 3}))
      .Output({0, 3})
      .Output({3})
      .Output({3});
  cuda_test::ExpectCudaMatchesCpu(grad, 0.0f);
}

TEST(CudaLayerNormGradTest, RepeatedActsGiveTheSameBits) {
  LOOM_SKIP_WITHOUT_GPU();
  // The parameter gradients are summed in a fixed order: no run-to-run differences.
  OpCall grad("layer_norm_grad");
  const Shape shape({513, 300});
  grad.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 71, -1.0f, 5.0f)))
      .Input(FloatTensor({300}, RandomFloats(300, 72, 0.5f, 1.5f)))
      .Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 73, -2.0f, 2.0f)))
      .Output(shape)
      .Output({300})
      .Output({300});
  absl::StatusOr<std::vector<HostTensor>> first = cuda_test::RunOnCuda(grad);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int run = 0; run < 3; ++run) {
    absl::StatusOr<std::vector<HostTensor>> again = cuda_test::RunOnCuda(grad);
    ASSERT_TRUE(again.ok()) << again.status();
    for (size_t output = 0; output < first->size(); ++output) {
      cuda_test::ExpectSameTensor((*first)[output], (*again)[output], 0.0f);
    }
  }
}

TEST(CudaLayerNormGradTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall arity("layer_norm_grad", "bad_layer_norm_grad");
  arity.Input(MakeTensor({2, 3})).Input(MakeTensor({3})).Input(MakeTensor({2, 3})).Output({2, 3});
  absl::Status status = BuildOnCuda(arity);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_layer_norm_grad'"));
  EXPECT_THAT(status.message(), HasSubstr("layer_norm_grad: expects 3 inputs (x, gamma, dy)"));

  OpCall gamma("layer_norm_grad");
  gamma.Input(MakeTensor({2, 3}))
      .Input(MakeTensor({2}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3})
      .Output({3})
      .Output({3});
  status = BuildOnCuda(gamma, plan::BFLOAT16);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("layer_norm_grad: input 'gamma' has shape [2] but the "
                                          "last axis of x has shape [3]"));

  OpCall epsilon("layer_norm_grad");
  epsilon.Attribute("epsilon", FloatAttribute(-1.0))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3})
      .Output({3})
      .Output({3});
  status = BuildOnCuda(epsilon);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("layer_norm_grad: attribute 'epsilon' must be finite and >= 0, got -1"));
}

// ---------------------------------------------------------------------------------------------
// sparse_cross_entropy_grad.

// Logits [samples..., classes] and labels of `label_type`, every fifth ignored.
void ExpectCrossEntropyGradMatches(const Shape& samples, int64_t classes, plan::DataType label_type,
                                   int64_t ignore_index, plan::DataType data_type,
                                   float tolerance) {
  std::vector<int64_t> dimensions(samples.dimensions().begin(), samples.dimensions().end());
  dimensions.push_back(classes);
  const Shape logits(dimensions);
  OpCall grad("sparse_cross_entropy_grad");
  if (ignore_index != -100) grad.Attribute("ignore_index", IntAttribute(ignore_index));
  grad.Input(FloatTensor(logits, RandomFloats(logits.NumElements(), 91, -3.0f, 3.0f)))
      .Input(IndexTensor(
          samples, RandomIndices(samples.NumElements(), classes, 93, 5, ignore_index), label_type))
      .Input(FloatTensor(samples, RandomFloats(samples.NumElements(), 92, 0.1f, 2.0f)))
      .Output(logits);
  cuda_test::ExpectCudaMatchesCpu(grad, tolerance, data_type);
}

TEST(CudaCrossEntropyGradTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (int64_t classes : RowLengths()) {
    SCOPED_TRACE(classes);
    ExpectCrossEntropyGradMatches(Shape({13}), classes, plan::INT32, -100, plan::FLOAT32,
                                  kFloat32Tolerance);
    ExpectCrossEntropyGradMatches(Shape({2, 3}), classes, plan::INT64, -100, plan::FLOAT32,
                                  kFloat32Tolerance);
    ExpectCrossEntropyGradMatches(Shape({4, 5}), classes, plan::INT32, 0, plan::FLOAT32,
                                  kFloat32Tolerance);
  }
  ExpectCrossEntropyGradMatches(Shape({2049}), 3, plan::INT64, -100, plan::FLOAT32,
                                kFloat32Tolerance);
}

TEST(CudaCrossEntropyGradTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  for (int64_t classes : RowLengths()) {
    SCOPED_TRACE(classes);
    ExpectCrossEntropyGradMatches(Shape({13}), classes, plan::INT32, -100, plan::BFLOAT16,
                                  kBfloat16Tolerance);
    ExpectCrossEntropyGradMatches(Shape({2, 3}), classes, plan::INT64, -100, plan::BFLOAT16,
                                  kBfloat16Tolerance);
    ExpectCrossEntropyGradMatches(Shape({4, 5}), classes, plan::INT32, 0, plan::BFLOAT16,
                                  kBfloat16Tolerance);
  }
}

TEST(CudaCrossEntropyGradTest, IgnoredSamplesGetZeroRows) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall grad("sparse_cross_entropy_grad");
  grad.Input(FloatTensor({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}))
      .Input(Int32Tensor({2}, {-100, 0}))
      .Input(FloatTensor({2}, {1.0f, 1.0f}))
      .Output({2, 2});
  cuda_test::ExpectCudaMatchesCpu(grad, kFloat32Tolerance);
  OpCall ignored("sparse_cross_entropy_grad");
  ignored.Attribute("ignore_index", IntAttribute(7))
      .Input(FloatTensor({3, 2}, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}))
      .Input(Int64Tensor({3}, {7, 1, 7}))
      .Input(FloatTensor({3}, {1.0f, 0.5f, 2.0f}))
      .Output({3, 2});
  cuda_test::ExpectCudaMatchesCpu(ignored, kFloat32Tolerance);
}

TEST(CudaCrossEntropyGradTest, ALabelOutOfRangeFailsTheNextActNamingIt) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall grad("sparse_cross_entropy_grad", "bad_labels");
  grad.Input(MakeTensor({4, 4}))
      .Input(Int64Tensor({4}, {0, 4, 1, -3}))
      .Input(MakeTensor({4}))
      .Output({4, 4});
  std::vector<absl::Status> statuses = ComputeThriceOnCuda(grad);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(statuses[0].message(), HasSubstr("task 'bad_labels'"));
  EXPECT_THAT(statuses[0].message(), HasSubstr("sparse_cross_entropy_grad: label 4 at labels[1] "
                                               "is outside [0, 4) (ignore_index is -100)"));
  // Reported once: the act after the report runs (and finds the label again).
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];

  OpCall int32_labels("sparse_cross_entropy_grad", "bad_int32_labels");
  int32_labels.Input(MakeTensor({2, 3, 4}))
      .Input(Int32Tensor({2, 3}, {0, 1, 2, 3, -100, -1}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3, 4});
  statuses = ComputeThriceOnCuda(int32_labels);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(statuses[0].message(),
              HasSubstr("sparse_cross_entropy_grad: label -1 at labels[1, 2] is outside [0, 4)"));
}

TEST(CudaCrossEntropyGradTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall labels("sparse_cross_entropy_grad", "bad_cross_entropy_grad");
  labels.Input(MakeTensor({3, 4})).Input(MakeTensor({3})).Input(MakeTensor({3})).Output({3, 4});
  absl::Status status = BuildOnCuda(labels);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_cross_entropy_grad'"));
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: input 'labels' must be "
                                          "int32 or int64, got float32"));

  OpCall dloss("sparse_cross_entropy_grad");
  dloss.Input(MakeTensor({3, 4}))
      .Input(Int32Tensor({3}, {0, 1, 2}))
      .Input(MakeTensor({1}))
      .Output({3, 4});
  status = BuildOnCuda(dloss, plan::BFLOAT16);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: input 'dloss' has shape "
                                          "[1] but logits without its last axis has shape [3]"));

  OpCall scalar("sparse_cross_entropy_grad");
  scalar.Input(MakeTensor({})).Input(Int32Tensor({}, {0})).Input(MakeTensor({})).Output({});
  status = BuildOnCuda(scalar);
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: input 'logits' must have "
                                          "rank >= 1, got a scalar"));
}

// ---------------------------------------------------------------------------------------------
// embedding_grad.

// A table [rows, width] and `count` ids in [0, id_bound) (many repeated), with attributes when
// row_offset / logical_rows >= 0.
void ExpectEmbeddingGradMatches(int64_t rows, int64_t width, const Shape& ids_shape,
                                int64_t id_bound, plan::DataType id_type, int64_t row_offset,
                                int64_t logical_rows, plan::DataType data_type, float tolerance) {
  std::vector<int64_t> dimensions(ids_shape.dimensions().begin(), ids_shape.dimensions().end());
  dimensions.push_back(width);
  const Shape dy(dimensions);
  OpCall grad("embedding_grad");
  if (row_offset >= 0) grad.Attribute("row_offset", IntAttribute(row_offset));
  if (logical_rows >= 0) grad.Attribute("logical_rows", IntAttribute(logical_rows));
  grad.Input(IndexTensor(ids_shape, RandomIndices(ids_shape.NumElements(), id_bound, 83), id_type))
      .Input(FloatTensor(dy, RandomFloats(dy.NumElements(), 82, -2.0f, 2.0f)))
      .Output({rows, width});
  cuda_test::ExpectCudaMatchesCpu(grad, tolerance, data_type);
}

void ExpectEmbeddingGradCases(plan::DataType data_type, float tolerance) {
  for (int64_t width : RowLengths()) {
    SCOPED_TRACE(width);
    // Few rows, many ids: every row repeated.
    ExpectEmbeddingGradMatches(5, width, Shape({2, 3}), 5, plan::INT32, -1, -1, data_type,
                               tolerance);
    ExpectEmbeddingGradMatches(11, width, Shape({4, 50}), 11, plan::INT64, -1, -1, data_type,
                               tolerance);
    // Rows never looked up.
    ExpectEmbeddingGradMatches(300, width, Shape({37}), 300, plan::INT32, -1, -1, data_type,
                               tolerance);
    // Vocabulary parallel: this shard holds rows [40, 47) of 100.
    ExpectEmbeddingGradMatches(7, width, Shape({3, 21}), 100, plan::INT64, 40, 100, data_type,
                               tolerance);
    ExpectEmbeddingGradMatches(7, width, Shape({61}), 60, plan::INT32, 45, -1, data_type,
                               tolerance);
  }
  // Many ids, one short row.
  ExpectEmbeddingGradMatches(1000, 1, Shape({8, 1025}), 1000, plan::INT64, -1, -1, data_type,
                             tolerance);
}

TEST(CudaEmbeddingGradTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectEmbeddingGradCases(plan::FLOAT32, kFloat32Tolerance);
}

TEST(CudaEmbeddingGradTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectEmbeddingGradCases(plan::BFLOAT16, kBfloat16Tolerance);
}

TEST(CudaEmbeddingGradTest, SumsInTheCpuOrderBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall exact("embedding_grad");
  exact.Input(Int32Tensor({3}, {2, 0, 2}))
      .Input(FloatTensor({3, 2}, {1.0f, 2.0f, 10.0f, 20.0f, 100.0f, 200.0f}))
      .Output({3, 2});
  cuda_test::ExpectCudaMatchesCpu(exact, 0.0f);
  // Repeated ids summed in id order, as the CPU does: the same float bits.
  OpCall repeated("embedding_grad");
  repeated.Input(Int64Tensor({500}, RandomIndices(500, 3, 84)))
      .Input(FloatTensor({500, 9}, RandomFloats(4500, 85, -100.0f, 100.0f)))
      .Output({3, 9});
  cuda_test::ExpectCudaMatchesCpu(repeated, 0.0f);
}

TEST(CudaEmbeddingGradTest, NoIdsGiveAZeroTable) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall grad("embedding_grad");
  grad.Input(Int32Tensor({0}, {})).Input(MakeTensor({0, 3})).Output({4, 3});
  cuda_test::ExpectCudaMatchesCpu(grad, 0.0f);
}

TEST(CudaEmbeddingGradTest, AnIdOutOfRangeFailsTheNextActNamingIt) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall grad("embedding_grad", "bad_ids");
  grad.Attribute("row_offset", IntAttribute(2))
      .Attribute("logical_rows", IntAttribute(6))
      .Input(Int64Tensor({2, 2}, {0, 3, 6, 7}))
      .Input(MakeTensor({2, 2, 3}))
      .Output({2, 3});
  std::vector<absl::Status> statuses = ComputeThriceOnCuda(grad);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(statuses[0].message(), HasSubstr("task 'bad_ids'"));
  // The first bad id, as the CPU reports it.
  EXPECT_THAT(statuses[0].message(), HasSubstr("embedding_grad: id 6 at ids[1, 0] is outside "
                                               "[0, 6)"));
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];

  OpCall negative("embedding_grad", "negative_id");
  negative.Attribute("row_offset", IntAttribute(2))
      .Input(Int32Tensor({2}, {3, -1}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3});
  statuses = ComputeThriceOnCuda(negative);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_THAT(statuses[0].message(),
              HasSubstr("embedding_grad: id -1 at ids[1] is outside [0, inf)"));

  OpCall whole("embedding_grad", "whole_table");
  whole.Input(Int32Tensor({2}, {1, 2})).Input(MakeTensor({2, 3})).Output({2, 3});
  statuses = ComputeThriceOnCuda(whole);
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_THAT(statuses[0].message(), HasSubstr("embedding_grad: id 2 at ids[1] is outside [0, 2)"));
}

TEST(CudaEmbeddingGradTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall ids("embedding_grad", "bad_embedding_grad");
  ids.Input(MakeTensor({2})).Input(MakeTensor({2, 3})).Output({4, 3});
  absl::Status status = BuildOnCuda(ids);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_embedding_grad'"));
  EXPECT_THAT(status.message(),
              HasSubstr("embedding_grad: input 'ids' must be int32 or int64, got float32"));

  OpCall dy("embedding_grad");
  dy.Input(Int32Tensor({2}, {0, 1})).Input(MakeTensor({2, 4})).Output({4, 3});
  status = BuildOnCuda(dy, plan::BFLOAT16);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("embedding_grad: input 'dy' has shape [2, 4] but ids "
                                          "[2] of table [4, 3] give [2, 3]"));

  OpCall offset("embedding_grad");
  offset.Attribute("row_offset", IntAttribute(-1))
      .Input(Int32Tensor({2}, {0, 1}))
      .Input(MakeTensor({2, 3}))
      .Output({4, 3});
  status = BuildOnCuda(offset);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("embedding_grad: attribute 'row_offset' must be >= 0, got -1"));
}

}  // namespace
}  // namespace loom
