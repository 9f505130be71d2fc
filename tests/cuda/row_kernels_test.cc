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
using kernel_test::BoolAttribute;
using kernel_test::FloatAttribute;
using kernel_test::FloatTensor;
using kernel_test::Int32Tensor;
using kernel_test::Int64Tensor;
using kernel_test::IntAttribute;
using kernel_test::IntListAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

constexpr float kFloat32Tolerance = 1e-5f;
constexpr float kBfloat16Tolerance = 2e-2f;

// `shape` with `last` appended.
Shape Appended(const Shape& shape, int64_t last) {
  std::vector<int64_t> dimensions(shape.dimensions().begin(), shape.dimensions().end());
  dimensions.push_back(last);
  return Shape(dimensions);
}

void ExpectInvalidArgument(const absl::Status& status, const std::string& task,
                           const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("task '" + task + "'"));
  EXPECT_THAT(status.message(), HasSubstr(message));
}

// Runs `call` on the GPU three times (as float32) and expects the same bits every time.
void ExpectRepeatable(const OpCall& call) {
  absl::StatusOr<std::vector<HostTensor>> first = cuda_test::RunOnCuda(call);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<std::vector<HostTensor>> again = cuda_test::RunOnCuda(call);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(again->size(), first->size());
    for (size_t output = 0; output < first->size(); ++output) {
      cuda_test::ExpectSameTensor((*first)[output], (*again)[output], 0.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// softmax and log_softmax.

void ExpectSoftmaxMatches(const std::string& op, const Shape& shape, plan::DataType data_type,
                          float tolerance) {
  OpCall call(op);
  call.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 11, -5.0f, 5.0f))).Output(shape);
  cuda_test::ExpectCudaMatchesCpu(call, tolerance, data_type);
}

void ExpectSoftmaxCases(plan::DataType data_type, float tolerance) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int64_t n : RowLengths()) {
      for (const Shape& shape : {Shape({n}), Shape({3, n}), Shape({2, 5, n})}) {
        SCOPED_TRACE(std::string(op) + " " + shape.ToString());
        ExpectSoftmaxMatches(op, shape, data_type, tolerance);
      }
    }
    // Many short rows (a warp each), the longest warp rows, and the shortest block rows.
    for (const Shape& shape : {Shape({4099, 3}), Shape({9, 256}), Shape({300, 257})}) {
      SCOPED_TRACE(std::string(op) + " " + shape.ToString());
      ExpectSoftmaxMatches(op, shape, data_type, tolerance);
    }
  }
}

TEST(CudaSoftmaxTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectSoftmaxCases(plan::FLOAT32, kFloat32Tolerance);
}

TEST(CudaSoftmaxTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectSoftmaxCases(plan::BFLOAT16, kBfloat16Tolerance);
}

TEST(CudaSoftmaxTest, StableWithLargeInputsAndEmptyRows) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const char* op : {"softmax", "log_softmax"}) {
    SCOPED_TRACE(op);
    OpCall large(op);
    large
        .Input(FloatTensor(
            {3, 3}, {1000.0f, 999.0f, 998.0f, -1000.0f, -1001.0f, -1002.0f, 1e30f, 0.0f, -1e30f}))
        .Output({3, 3});
    cuda_test::ExpectCudaMatchesCpu(large, kFloat32Tolerance);
    OpCall empty(op);
    empty.Input(MakeTensor({3, 0})).Output({3, 0});
    cuda_test::ExpectCudaMatchesCpu(empty, 0.0f);
    OpCall no_rows(op);
    no_rows.Input(MakeTensor({0, 5})).Output({0, 5});
    cuda_test::ExpectCudaMatchesCpu(no_rows, 0.0f);
  }
}

TEST(CudaSoftmaxTest, RepeatedActsGiveTheSameBits) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("softmax");
  call.Input(FloatTensor({5, 4097}, RandomFloats(5 * 4097, 12, -5.0f, 5.0f))).Output({5, 4097});
  ExpectRepeatable(call);
}

TEST(CudaSoftmaxTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall scalar("softmax", "bad_softmax");
  scalar.Input(MakeTensor({})).Output({});
  ExpectInvalidArgument(BuildOnCuda(scalar), "bad_softmax",
                        "softmax: input must have rank >= 1, got a scalar");

  OpCall mismatch("log_softmax", "bad_log_softmax");
  mismatch.Input(MakeTensor({2, 3})).Output({3, 2});
  ExpectInvalidArgument(BuildOnCuda(mismatch, plan::BFLOAT16), "bad_log_softmax",
                        "log_softmax: output has shape [3, 2] but input has shape [2, 3]");

  // Mixed float types, and types the kernel does not compute on.
  OpCall mixed("softmax", "mixed");
  mixed.Input(MakeTensor({2, 5})).Output({2, 5});
  KernelInit init = mixed.Init();
  init.stream = &cuda_test::TestStream();
  init.outputs[0].set_data_type(plan::BFLOAT16);
  ExpectInvalidArgument(cuda_test::Kernels().Create(plan::CUDA, init).status(), "mixed",
                        "softmax: ");
  init = mixed.Init();
  init.stream = &cuda_test::TestStream();
  init.inputs[0].set_data_type(plan::INT32);
  init.outputs[0].set_data_type(plan::INT32);
  ExpectInvalidArgument(cuda_test::Kernels().Create(plan::CUDA, init).status(), "mixed",
                        "softmax: ");
}

TEST(CudaSoftmaxTest, AKernelOnACpuStreamIsRefused) {
  // No GPU needed: the factory looks at the stream before touching CUDA.
  for (const char* op : {"softmax", "log_softmax", "reduce_sum"}) {
    SCOPED_TRACE(op);
    OpCall call(op, "misplaced");
    call.Input(MakeTensor({2, 3})).Output(std::string(op) == "reduce_sum" ? Shape{} : Shape{2, 3});
    SynchronousStreamContext cpu_stream;
    KernelInit init = call.Init();
    init.stream = &cpu_stream;
    absl::Status status = cuda_test::Kernels().Create(plan::CUDA, init).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr("task 'misplaced'"));
  }
}

// ---------------------------------------------------------------------------------------------
// layer_norm.

// x [..., n] offset from zero, as in the CPU tests; with the statistics outputs when
// `statistics`; `epsilon` < 0 leaves the attribute out.
void ExpectLayerNormMatches(const Shape& shape, bool statistics, double epsilon,
                            plan::DataType data_type, float tolerance) {
  const int64_t n = shape.dimension(shape.rank() - 1);
  const Shape rows(shape.dimensions().subspan(0, shape.rank() - 1));
  OpCall call("layer_norm");
  if (epsilon >= 0.0) call.Attribute("epsilon", FloatAttribute(epsilon));
  call.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 31, -1.0f, 5.0f)))
      .Input(FloatTensor({n}, RandomFloats(n, 32, 0.5f, 1.5f)))
      .Input(FloatTensor({n}, RandomFloats(n, 33)))
      .Output(shape);
  if (statistics) call.Output(rows).Output(rows);
  cuda_test::ExpectCudaMatchesCpu(call, tolerance, data_type);
}

void ExpectLayerNormCases(plan::DataType data_type, float tolerance) {
  for (int64_t n : RowLengths()) {
    for (const Shape& shape : {Shape({n}), Shape({2, 3, n}), Shape({37, n})}) {
      for (bool statistics : {false, true}) {
        SCOPED_TRACE(shape.ToString() + (statistics ? " with statistics" : ""));
        ExpectLayerNormMatches(shape, statistics, -1.0, data_type, tolerance);
      }
    }
  }
  for (const Shape& shape : {Shape({2049, 5}), Shape({9, 256}), Shape({33, 257})}) {
    SCOPED_TRACE(shape.ToString());
    ExpectLayerNormMatches(shape, true, -1.0, data_type, tolerance);
  }
  ExpectLayerNormMatches(Shape({4, 7}), true, 0.1, data_type, tolerance);
}

TEST(CudaLayerNormTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectLayerNormCases(plan::FLOAT32, kFloat32Tolerance);
}

TEST(CudaLayerNormTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectLayerNormCases(plan::BFLOAT16, kBfloat16Tolerance);
}

TEST(CudaLayerNormTest, ConstantAndEmptyRows) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall constant("layer_norm");
  constant.Input(FloatTensor({2, 3}, {4, 4, 4, -1, -1, -1}))
      .Input(FloatTensor({3}, {2, 2, 2}))
      .Input(FloatTensor({3}, {0.5f, 1.5f, -2}))
      .Output({2, 3})
      .Output({2})
      .Output({2});
  cuda_test::ExpectCudaMatchesCpu(constant, kFloat32Tolerance);

  // Rows of nothing: mean 0 and rstd 1 / sqrt(epsilon), as on the CPU.
  OpCall empty_rows("layer_norm");
  empty_rows.Input(MakeTensor({4, 0}))
      .Input(MakeTensor({0}))
      .Input(MakeTensor({0}))
      .Output({4, 0})
      .Output({4})
      .Output({4});
  cuda_test::ExpectCudaMatchesCpu(empty_rows, 0.0f);

  OpCall no_rows("layer_norm");
  no_rows.Input(MakeTensor({0, 3}))
      .Input(FloatTensor({3}, {1, 2, 3}))
      .Input(FloatTensor({3}, {1, 2, 3}))
      .Output({0, 3})
      .Output({0})
      .Output({0});
  cuda_test::ExpectCudaMatchesCpu(no_rows, 0.0f);
}

TEST(CudaLayerNormTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall gamma("layer_norm", "bad_layer_norm");
  gamma.Input(MakeTensor({2, 4})).Input(MakeTensor({3})).Input(MakeTensor({4})).Output({2, 4});
  ExpectInvalidArgument(BuildOnCuda(gamma), "bad_layer_norm",
                        "layer_norm: gamma has shape [3] but the last axis of x has shape [4]");

  OpCall statistics("layer_norm", "bad_statistics");
  statistics.Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}))
      .Input(MakeTensor({4}))
      .Output({2, 4})
      .Output({2, 1})
      .Output({2});
  ExpectInvalidArgument(BuildOnCuda(statistics, plan::BFLOAT16), "bad_statistics",
                        "layer_norm: output mean has shape [2, 1] but x without its last axis "
                        "has shape [2]");

  OpCall two_outputs("layer_norm", "two_outputs");
  two_outputs.Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}))
      .Input(MakeTensor({4}))
      .Output({2, 4})
      .Output({2});
  ExpectInvalidArgument(BuildOnCuda(two_outputs), "two_outputs",
                        "layer_norm: expects 3 inputs (x, gamma, beta) and 1 or 3 outputs "
                        "(y[, mean, rstd]), got 3 inputs and 2 outputs");

  OpCall epsilon("layer_norm", "bad_epsilon");
  epsilon.Attribute("epsilon", FloatAttribute(-1.0))
      .Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}))
      .Input(MakeTensor({4}))
      .Output({2, 4});
  ExpectInvalidArgument(BuildOnCuda(epsilon), "bad_epsilon",
                        "layer_norm: attribute 'epsilon' must be finite and >= 0, got -1");
}

// ---------------------------------------------------------------------------------------------
// sparse_cross_entropy.

// Logits [samples..., classes] and labels of `label_type`, every fifth ignored.
void ExpectCrossEntropyMatches(const Shape& samples, int64_t classes, plan::DataType label_type,
                               int64_t ignore_index, plan::DataType data_type, float tolerance) {
  const Shape logits = Appended(samples, classes);
  OpCall call("sparse_cross_entropy");
  if (ignore_index != -100) call.Attribute("ignore_index", IntAttribute(ignore_index));
  call.Input(FloatTensor(logits, RandomFloats(logits.NumElements(), 41, -5.0f, 5.0f)))
      .Input(IndexTensor(
          samples, RandomIndices(samples.NumElements(), classes, 42, 5, ignore_index), label_type))
      .Output(samples);
  cuda_test::ExpectCudaMatchesCpu(call, tolerance, data_type);
}

void ExpectCrossEntropyCases(plan::DataType data_type, float tolerance) {
  for (int64_t classes : RowLengths()) {
    SCOPED_TRACE(classes);
    ExpectCrossEntropyMatches(Shape({13}), classes, plan::INT32, -100, data_type, tolerance);
    ExpectCrossEntropyMatches(Shape({2, 3}), classes, plan::INT64, -100, data_type, tolerance);
    ExpectCrossEntropyMatches(Shape({4, 5}), classes, plan::INT32, 0, data_type, tolerance);
  }
  ExpectCrossEntropyMatches(Shape({2049}), 3, plan::INT64, -100, data_type, tolerance);
  ExpectCrossEntropyMatches(Shape({7}), 257, plan::INT64, -100, data_type, tolerance);
}

TEST(CudaSparseCrossEntropyTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectCrossEntropyCases(plan::FLOAT32, kFloat32Tolerance);
}

TEST(CudaSparseCrossEntropyTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectCrossEntropyCases(plan::BFLOAT16, kBfloat16Tolerance);
}

TEST(CudaSparseCrossEntropyTest, StableWithLargeLogitsAndIgnoredSamples) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall large("sparse_cross_entropy");
  large.Input(FloatTensor({2, 3}, {1000, 999, 998, -1000, -1001, 50000}))
      .Input(Int32Tensor({2}, {1, 0}))
      .Output({2});
  cuda_test::ExpectCudaMatchesCpu(large, kFloat32Tolerance);

  OpCall ignored("sparse_cross_entropy");
  ignored.Attribute("ignore_index", IntAttribute(7))
      .Input(FloatTensor({3, 2}, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}))
      .Input(Int64Tensor({3}, {7, 1, 7}))
      .Output({3});
  cuda_test::ExpectCudaMatchesCpu(ignored, kFloat32Tolerance);

  OpCall no_samples("sparse_cross_entropy");
  no_samples.Input(MakeTensor({0, 4})).Input(Int32Tensor({0}, {})).Output({0});
  cuda_test::ExpectCudaMatchesCpu(no_samples, 0.0f);
}

TEST(CudaSparseCrossEntropyTest, ALabelOutOfRangeFailsTheNextActNamingIt) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("sparse_cross_entropy", "bad_labels");
  call.Input(MakeTensor({4, 4})).Input(Int64Tensor({4}, {0, 4, 1, -3})).Output({4});
  std::vector<absl::Status> statuses = ComputeThriceOnCuda(call);
  ASSERT_EQ(statuses.size(), 2u);
  ExpectInvalidArgument(statuses[0], "bad_labels",
                        "sparse_cross_entropy: label 4 at labels[1] is outside [0, 4) "
                        "(ignore_index is -100)");
  // Reported once: the act after the report runs (and finds the label again).
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];

  OpCall int32_labels("sparse_cross_entropy", "bad_int32_labels");
  int32_labels.Input(MakeTensor({2, 3, 7}))
      .Input(Int32Tensor({2, 3}, {0, 1, 2, 3, 7, 0}))
      .Output({2, 3});
  statuses = ComputeThriceOnCuda(int32_labels);
  ASSERT_EQ(statuses.size(), 2u);
  ExpectInvalidArgument(statuses[0], "bad_int32_labels",
                        "sparse_cross_entropy: label 7 at labels[1, 1] is outside [0, 7)");
}

TEST(CudaSparseCrossEntropyTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall label_type("sparse_cross_entropy", "bad_cross_entropy");
  label_type.Input(MakeTensor({3, 4})).Input(MakeTensor({3})).Output({3});
  ExpectInvalidArgument(BuildOnCuda(label_type), "bad_cross_entropy",
                        "sparse_cross_entropy: input 'labels' must be int32 or int64, got float32");

  OpCall labels("sparse_cross_entropy", "bad_labels_shape");
  labels.Input(MakeTensor({3, 4})).Input(MakeTensor({4}, plan::INT32)).Output({4});
  ExpectInvalidArgument(BuildOnCuda(labels, plan::BFLOAT16), "bad_labels_shape",
                        "sparse_cross_entropy: labels has shape [4] but logits without its last "
                        "axis has shape [3]");

  OpCall output("sparse_cross_entropy", "bad_output");
  output.Input(MakeTensor({3, 4})).Input(MakeTensor({3}, plan::INT32)).Output({3, 1});
  ExpectInvalidArgument(BuildOnCuda(output), "bad_output",
                        "sparse_cross_entropy: output has shape [3, 1] but labels has shape [3]");

  OpCall scalar("sparse_cross_entropy", "scalar_logits");
  scalar.Input(MakeTensor({})).Input(Int32Tensor({}, {0})).Output({});
  ExpectInvalidArgument(BuildOnCuda(scalar), "scalar_logits",
                        "sparse_cross_entropy: input 'logits' must have rank >= 1, got a scalar");

  OpCall logits_type("sparse_cross_entropy", "int_logits");
  logits_type.Input(MakeTensor({3, 4}, plan::INT32))
      .Input(MakeTensor({3}, plan::INT32))
      .Output({3});
  ExpectInvalidArgument(BuildOnCuda(logits_type), "int_logits",
                        "sparse_cross_entropy: input 'logits' must be float32, got int32");
}

// ---------------------------------------------------------------------------------------------
// embedding.

// A table [rows, width] and ids in [0, id_bound), with attributes when row_offset /
// logical_rows >= 0. A lookup copies: the GPU's rows are the CPU's bit for bit.
void ExpectEmbeddingMatches(int64_t rows, int64_t width, const Shape& ids_shape, int64_t id_bound,
                            plan::DataType id_type, int64_t row_offset, int64_t logical_rows,
                            plan::DataType data_type) {
  OpCall call("embedding");
  if (row_offset >= 0) call.Attribute("row_offset", IntAttribute(row_offset));
  if (logical_rows >= 0) call.Attribute("logical_rows", IntAttribute(logical_rows));
  call.Input(FloatTensor({rows, width}, RandomFloats(rows * width, 51, -2.0f, 2.0f)))
      .Input(IndexTensor(ids_shape, RandomIndices(ids_shape.NumElements(), id_bound, 52), id_type))
      .Output(Appended(ids_shape, width));
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f, data_type);
}

void ExpectEmbeddingCases(plan::DataType data_type) {
  for (int64_t width : RowLengths()) {
    SCOPED_TRACE(width);
    ExpectEmbeddingMatches(5, width, Shape({2, 3}), 5, plan::INT32, -1, -1, data_type);
    ExpectEmbeddingMatches(11, width, Shape({4, 50}), 11, plan::INT64, -1, -1, data_type);
    // Vocabulary parallel: this shard holds rows [40, 47) of 100; the others give zeros.
    ExpectEmbeddingMatches(7, width, Shape({3, 21}), 100, plan::INT64, 40, 100, data_type);
    // An offset without logical_rows: any id >= 0 is valid.
    ExpectEmbeddingMatches(7, width, Shape({61}), 60, plan::INT32, 45, -1, data_type);
  }
  // Many ids, one short row.
  ExpectEmbeddingMatches(1000, 1, Shape({8, 1025}), 1000, plan::INT64, -1, -1, data_type);
}

TEST(CudaEmbeddingTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectEmbeddingCases(plan::FLOAT32);
}

TEST(CudaEmbeddingTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectEmbeddingCases(plan::BFLOAT16);
}

TEST(CudaEmbeddingTest, OffsetShardsAndEmptyLookups) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall offset("embedding");
  offset.Attribute("row_offset", IntAttribute(2))
      .Input(FloatTensor({2, 1}, {20, 30}))
      .Input(Int32Tensor({4}, {0, 2, 3, 1000}))
      .Output({4, 1});
  cuda_test::ExpectCudaMatchesCpu(offset, 0.0f);

  OpCall no_ids("embedding");
  no_ids.Input(MakeTensor({5, 3})).Input(Int64Tensor({0}, {})).Output({0, 3});
  cuda_test::ExpectCudaMatchesCpu(no_ids, 0.0f);

  OpCall no_width("embedding");
  no_width.Input(MakeTensor({5, 0})).Input(Int64Tensor({3}, {0, 4, 2})).Output({3, 0});
  cuda_test::ExpectCudaMatchesCpu(no_width, 0.0f);
}

TEST(CudaEmbeddingTest, AnIdOutOfRangeFailsTheNextActNamingIt) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall whole("embedding", "bad_ids");
  whole.Input(MakeTensor({5, 3})).Input(Int32Tensor({2, 2}, {0, 1, 5, 2})).Output({2, 2, 3});
  std::vector<absl::Status> statuses = ComputeThriceOnCuda(whole);
  ASSERT_EQ(statuses.size(), 2u);
  ExpectInvalidArgument(statuses[0], "bad_ids", "embedding: id 5 at ids[1, 0] is outside [0, 5)");
  // Reported once: the act after the report runs (and finds the id again).
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];

  OpCall negative("embedding", "negative_id");
  negative.Input(MakeTensor({5, 3})).Input(Int64Tensor({3}, {0, -1, -2})).Output({3, 3});
  statuses = ComputeThriceOnCuda(negative);
  ASSERT_EQ(statuses.size(), 2u);
  // The first bad id, as the CPU reports it.
  ExpectInvalidArgument(statuses[0], "negative_id", "embedding: id -1 at ids[1] is outside [0, 5)");

  OpCall logical("embedding", "beyond_logical_rows");
  logical.Attribute("row_offset", IntAttribute(5))
      .Attribute("logical_rows", IntAttribute(10))
      .Input(MakeTensor({5, 3}))
      .Input(Int64Tensor({3}, {9, 10, 2}))
      .Output({3, 3});
  statuses = ComputeThriceOnCuda(logical);
  ASSERT_EQ(statuses.size(), 2u);
  ExpectInvalidArgument(statuses[0], "beyond_logical_rows",
                        "embedding: id 10 at ids[1] is outside [0, 10)");

  OpCall unknown("embedding", "unknown_logical_rows");
  unknown.Attribute("row_offset", IntAttribute(5))
      .Input(MakeTensor({5, 3}))
      .Input(Int64Tensor({1}, {-3}))
      .Output({1, 3});
  statuses = ComputeThriceOnCuda(unknown);
  ASSERT_EQ(statuses.size(), 2u);
  ExpectInvalidArgument(statuses[0], "unknown_logical_rows",
                        "embedding: id -3 at ids[0] is outside [0, inf)");
}

TEST(CudaEmbeddingTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall id_type("embedding", "bad_embedding");
  id_type.Input(MakeTensor({5, 3})).Input(MakeTensor({2})).Output({2, 3});
  ExpectInvalidArgument(BuildOnCuda(id_type), "bad_embedding",
                        "embedding: input 'ids' must be int32 or int64, got float32");

  OpCall shape("embedding", "bad_shape");
  shape.Input(MakeTensor({5, 3})).Input(MakeTensor({2, 2}, plan::INT64)).Output({4, 3});
  ExpectInvalidArgument(BuildOnCuda(shape, plan::BFLOAT16), "bad_shape",
                        "embedding: output has shape [4, 3] but ids [2, 2] of table [5, 3] give "
                        "[2, 2, 3]");

  OpCall rank("embedding", "bad_rank");
  rank.Input(MakeTensor({15})).Input(MakeTensor({2}, plan::INT64)).Output({2, 3});
  ExpectInvalidArgument(BuildOnCuda(rank), "bad_rank",
                        "embedding: input 'table' must have rank 2 [rows, width], got [15]");

  OpCall offset("embedding", "bad_offset");
  offset.Attribute("row_offset", IntAttribute(-1))
      .Input(MakeTensor({5, 3}))
      .Input(MakeTensor({2}, plan::INT64))
      .Output({2, 3});
  ExpectInvalidArgument(BuildOnCuda(offset), "bad_offset",
                        "embedding: attribute 'row_offset' must be >= 0, got -1");

  OpCall table_type("embedding", "int_table");
  table_type.Input(MakeTensor({5, 3}, plan::INT32))
      .Input(MakeTensor({2}, plan::INT32))
      .Output({2, 3});
  ExpectInvalidArgument(BuildOnCuda(table_type), "int_table",
                        "embedding: input 'table' must be float32, got int32");
}

// ---------------------------------------------------------------------------------------------
// reduce_sum and reduce_mean.

struct ReduceCase {
  Shape input;
  std::vector<int64_t> axes;
  bool keep_dims = false;
};

// The output shape of reducing `test_case.input` over its axes (empty: all).
Shape ReducedShape(const ReduceCase& test_case) {
  const int rank = test_case.input.rank();
  std::vector<bool> reduced(rank, test_case.axes.empty());
  for (int64_t axis : test_case.axes) reduced[axis < 0 ? axis + rank : axis] = true;
  std::vector<int64_t> dimensions;
  for (int axis = 0; axis < rank; ++axis) {
    if (!reduced[axis]) {
      dimensions.push_back(test_case.input.dimension(axis));
    } else if (test_case.keep_dims) {
      dimensions.push_back(1);
    }
  }
  return Shape(dimensions);
}

// `divisor` <= 0 leaves the attribute out.
void BuildReduceCall(OpCall& call, const ReduceCase& test_case, double divisor = 0.0) {
  call.Attribute("keep_dims", BoolAttribute(test_case.keep_dims));
  if (!test_case.axes.empty()) call.Attribute("axes", IntListAttribute(test_case.axes));
  if (divisor > 0.0) call.Attribute("divisor", FloatAttribute(divisor));
  call.Input(FloatTensor(test_case.input,
                         RandomFloats(test_case.input.NumElements(), 61, -2.0f, 2.0f)))
      .Output(ReducedShape(test_case));
}

const std::vector<ReduceCase>& ReduceCases() {
  static const auto* cases = new std::vector<ReduceCase>{
      // The CPU tests' axes sets.
      {Shape({3, 4, 5, 2}), {}, false},
      {Shape({3, 4, 5, 2}), {}, true},
      {Shape({3, 4, 5, 2}), {0}, false},
      {Shape({3, 4, 5, 2}), {1}, true},
      {Shape({3, 4, 5, 2}), {3}, false},
      {Shape({3, 4, 5, 2}), {-1}, true},
      {Shape({3, 4, 5, 2}), {0, 2}, false},
      {Shape({3, 4, 5, 2}), {0, 2}, true},
      {Shape({3, 4, 5, 2}), {1, 3}, false},
      {Shape({3, 4, 5, 2}), {1, 2}, true},
      {Shape({3, 4, 5, 2}), {2, 0}, false},
      {Shape({3, 4, 5, 2}), {0, 1, 2, 3}, false},
      {Shape({3, 4, 5, 2}), {0, 1, 3}, true},
      // Rows of the lengths the row kernels see, and size-one axes.
      {Shape({1}), {}, false},
      {Shape({7}), {0}, false},
      {Shape({3, 1000}), {1}, false},
      {Shape({4097}), {}, false},
      {Shape({2, 4097}), {-1}, true},
      {Shape({1, 3, 1}), {1}, false},
      {Shape({}), {}, false},
      // Long rows split into chunks; the whole tensor.
      {Shape({2, 70000}), {1}, false},
      {Shape({1000, 1000}), {}, false},
      // Strided columns (the innermost axis kept), in chunks when there are few of them.
      {Shape({1000, 7}), {0}, false},
      {Shape({3, 4097, 5}), {1}, false},
      {Shape({100000, 3}), {0}, true},
      // Several reduced and kept axes after merging.
      {Shape({6, 1, 33, 1, 3}), {0, 2}, true},
      {Shape({5, 300, 7}), {0, 2}, false},
      {Shape({4, 3, 1025, 2}), {1, 3}, false},
  };
  return *cases;
}

void ExpectReduceCases(plan::DataType data_type, float tolerance) {
  for (const ReduceCase& test_case : ReduceCases()) {
    for (const char* op : {"reduce_sum", "reduce_mean"}) {
      SCOPED_TRACE(std::string(op) + " " + test_case.input.ToString() + " axes " +
                   std::to_string(test_case.axes.size()) +
                   (test_case.keep_dims ? " keep_dims" : ""));
      OpCall call(op);
      BuildReduceCall(call, test_case);
      cuda_test::ExpectCudaMatchesCpu(call, tolerance, data_type);
    }
  }
  // A mean over a slice of a larger logical tensor.
  OpCall divided("reduce_mean");
  BuildReduceCall(divided, {Shape({2, 3}), {0}, false}, 8.0);
  cuda_test::ExpectCudaMatchesCpu(divided, tolerance, data_type);
}

TEST(CudaReduceTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectReduceCases(plan::FLOAT32, kFloat32Tolerance);
}

TEST(CudaReduceTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectReduceCases(plan::BFLOAT16, kBfloat16Tolerance);
}

TEST(CudaReduceTest, EmptyReductionIsZeroSumAndNanMean) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const char* op : {"reduce_sum", "reduce_mean"}) {
    SCOPED_TRACE(op);
    OpCall rows(op);
    rows.Attribute("axes", IntListAttribute({1})).Input(MakeTensor({2, 0})).Output({2});
    cuda_test::ExpectCudaMatchesCpu(rows, 0.0f);
    OpCall all(op);
    all.Input(MakeTensor({0, 3})).Output({});
    cuda_test::ExpectCudaMatchesCpu(all, 0.0f);
    OpCall columns(op);
    columns.Attribute("axes", IntListAttribute({0})).Input(MakeTensor({0, 3})).Output({3});
    cuda_test::ExpectCudaMatchesCpu(columns, 0.0f);
    OpCall no_outputs(op);
    no_outputs.Attribute("axes", IntListAttribute({1})).Input(MakeTensor({0, 3})).Output({0});
    cuda_test::ExpectCudaMatchesCpu(no_outputs, 0.0f);
  }
}

TEST(CudaReduceTest, RepeatedActsGiveTheSameBits) {
  LOOM_SKIP_WITHOUT_GPU();
  // Chunked rows, the whole tensor and chunked columns: partial sums added in a fixed order.
  for (const ReduceCase& test_case :
       {ReduceCase{Shape({2, 70000}), {1}, false}, ReduceCase{Shape({1000, 1000}), {}, false},
        ReduceCase{Shape({100000, 3}), {0}, false}}) {
    SCOPED_TRACE(test_case.input.ToString());
    OpCall call("reduce_sum");
    BuildReduceCall(call, test_case);
    ExpectRepeatable(call);
  }
}

TEST(CudaReduceTest, BadConfigurationsAreRejectedLikeTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall duplicate("reduce_sum", "bad_reduce");
  duplicate.Attribute("axes", IntListAttribute({1, -2}))
      .Input(MakeTensor({2, 3, 4}))
      .Output({2, 4});
  ExpectInvalidArgument(BuildOnCuda(duplicate), "bad_reduce",
                        "reduce_sum: attribute 'axes' [1, -2] names axis 1 twice");

  OpCall range("reduce_mean", "bad_axis");
  range.Attribute("axes", IntListAttribute({3})).Input(MakeTensor({2, 3, 4})).Output({2, 3});
  ExpectInvalidArgument(BuildOnCuda(range, plan::BFLOAT16), "bad_axis",
                        "reduce_mean: attribute 'axes' [3] has axis 3 outside input [2, 3, 4]");

  OpCall shape("reduce_sum", "bad_output");
  shape.Attribute("axes", IntListAttribute({1}))
      .Attribute("keep_dims", BoolAttribute(true))
      .Input(MakeTensor({2, 3, 4}))
      .Output({2, 4});
  ExpectInvalidArgument(BuildOnCuda(shape), "bad_output",
                        "reduce_sum: output has shape [2, 4] but reducing input [2, 3, 4] over "
                        "axes [1] with keep_dims=true gives [2, 1, 4]");

  OpCall divisor("reduce_mean", "bad_divisor");
  divisor.Attribute("divisor", FloatAttribute(0.0)).Input(MakeTensor({2})).Output({});
  ExpectInvalidArgument(BuildOnCuda(divisor), "bad_divisor",
                        "reduce_mean: attribute 'divisor' must be finite and > 0, got 0");

  OpCall sum_divisor("reduce_sum", "sum_divisor");
  sum_divisor.Attribute("divisor", FloatAttribute(2.0)).Input(MakeTensor({2})).Output({});
  ExpectInvalidArgument(BuildOnCuda(sum_divisor), "sum_divisor",
                        "reduce_sum: attribute 'divisor' applies to reduce_mean only");

  OpCall data_type("reduce_sum", "int_input");
  data_type.Input(MakeTensor({2}, plan::INT32)).Output({});
  ExpectInvalidArgument(BuildOnCuda(data_type), "int_input",
                        "reduce_sum: input 0 must be float32, got int32");
}

}  // namespace
}  // namespace loom
