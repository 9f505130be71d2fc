#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/file_roots.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/data/data_kernels.h"
#include "kernels/kernel_registry.h"
#include "tests/kernels/data/data_kernel_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

constexpr char kGplPath[] = "/usr/share/common-licenses/GPL-3";

std::string TempPath(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(::testing::TempDir(), "/loom_token_batch_", ::getpid(), "_",
                      info->test_suite_name(), "_", info->name(), "_", name);
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(stream.good()) << path;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(stream),
                              std::istreambuf_iterator<char>());
}

// The spec's offset, in 128-bit arithmetic: ((t * B + i) * T) mod (N - T - 1).
int64_t ExpectedOffset(int64_t step, int64_t global_batch, int64_t sample, int64_t sequence,
                       int64_t num_tokens) {
  const __int128 position =
      (static_cast<__int128>(step) * global_batch + sample) * static_cast<__int128>(sequence);
  return static_cast<int64_t>(position % (num_tokens - sequence - 1));
}

// The expected x (shift 0) or y (shift 1) rows of samples [first, first + count) of a step.
std::vector<int64_t> ExpectedRows(const std::vector<int64_t>& tokens, int64_t global_batch,
                                  int64_t sequence, int64_t step, int64_t first, int64_t count,
                                  int shift) {
  std::vector<int64_t> rows;
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  for (int64_t sample = first; sample < first + count; ++sample) {
    const int64_t offset = ExpectedOffset(step, global_batch, sample, sequence, num_tokens);
    for (int64_t k = 0; k < sequence; ++k) rows.push_back(tokens[offset + shift + k]);
  }
  return rows;
}

struct BatchConfig {
  std::string path;
  std::string format = "bytes";
  int64_t global_batch = 8;
  int64_t sequence = 5;
  int64_t sample_begin = 0;
  int64_t sample_count = 8;
  int64_t micro_batches = 1;
  plan::DataType data_type = plan::INT32;
  // Output rows; -1 for sample_count / micro_batches.
  int64_t rows = -1;
};

// An OpCall for "token_batch" with every attribute set from `config`.
std::unique_ptr<OpCall> MakeCall(const BatchConfig& config) {
  auto call = std::make_unique<OpCall>("token_batch");
  const int64_t rows = config.rows >= 0 ? config.rows : config.sample_count / config.micro_batches;
  call->Attribute("path", StringAttribute(config.path))
      .Attribute("format", StringAttribute(config.format))
      .Attribute("global_batch", IntAttribute(config.global_batch))
      .Attribute("sequence", IntAttribute(config.sequence))
      .Attribute("sample_begin", IntAttribute(config.sample_begin))
      .Attribute("sample_count", IntAttribute(config.sample_count))
      .Attribute("micro_batches", IntAttribute(config.micro_batches))
      .Output({rows, config.sequence}, config.data_type)
      .Output({rows, config.sequence}, config.data_type);
  return call;
}

absl::Status BuildError(const BatchConfig& config) {
  std::unique_ptr<OpCall> call = MakeCall(config);
  return BuildDataKernel(*call).status();
}

class TokenBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 97 tokens: a prime count, so that offsets wrap irregularly.
    for (int k = 0; k < 97; ++k) {
      const uint8_t byte = static_cast<uint8_t>((k * 37 + 11) % 256);
      bytes_.push_back(byte);
      tokens_.push_back(byte);
    }
    path_ = TempPath("tokens.bin");
    WriteFile(path_, bytes_);
  }

  void TearDown() override {
    for (const std::string& path : created_) std::remove(path.c_str());
    std::remove(path_.c_str());
  }

  std::string Created(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = TempPath(name);
    WriteFile(path, bytes);
    created_.push_back(path);
    return path;
  }

  void CheckFormatAgainstFormula(const std::string& path, const std::string& format,
                                 const std::vector<int64_t>& tokens);

  // Runs pieces [0, steps * M) of `config` and checks each against the formula.
  void CheckAgainstFormula(const BatchConfig& config, int64_t steps) {
    std::unique_ptr<OpCall> call = MakeCall(config);
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    const int64_t per_piece = config.sample_count / config.micro_batches;
    for (int64_t piece = 0; piece < steps * config.micro_batches; ++piece) {
      ASSERT_TRUE(call->Compute(**kernel, piece).ok());
      const int64_t step = piece / config.micro_batches;
      const int64_t first = config.sample_begin + (piece % config.micro_batches) * per_piece;
      SCOPED_TRACE(absl::StrCat("piece ", piece, " step ", step, " first sample ", first));
      EXPECT_EQ(
          TokenValues(call->output(0)),
          ExpectedRows(tokens_, config.global_batch, config.sequence, step, first, per_piece, 0));
      EXPECT_EQ(
          TokenValues(call->output(1)),
          ExpectedRows(tokens_, config.global_batch, config.sequence, step, first, per_piece, 1));
    }
  }

  std::vector<uint8_t> bytes_;
  std::vector<int64_t> tokens_;
  std::string path_;
  std::vector<std::string> created_;
};

TEST_F(TokenBatchTest, MatchesFormulaForStepsRanksAndMicroBatches) {
  struct Window {
    int64_t begin;
    int64_t count;
  };
  for (plan::DataType data_type : {plan::INT32, plan::INT64}) {
    for (Window window :
         {Window{0, 8}, Window{0, 4}, Window{4, 4}, Window{2, 2}, Window{6, 2}, Window{3, 1}}) {
      for (int64_t micro_batches : {1, 2, 4}) {
        if (window.count % micro_batches != 0) continue;
        SCOPED_TRACE(absl::StrCat("type ", data_type, " window [", window.begin, ", +",
                                  window.count, ") M ", micro_batches));
        CheckAgainstFormula({.path = path_,
                             .global_batch = 8,
                             .sequence = 5,
                             .sample_begin = window.begin,
                             .sample_count = window.count,
                             .micro_batches = micro_batches,
                             .data_type = data_type},
                            /*steps=*/6);
      }
    }
  }
}

TEST_F(TokenBatchTest, HandExampleAndShiftedTargets) {
  // B = 2, T = 3, N = 97: modulus 93. Step 1, sample 1: ((1 * 2 + 1) * 3) mod 93 = 9.
  std::unique_ptr<OpCall> call = MakeCall(
      {.path = path_, .global_batch = 2, .sequence = 3, .sample_begin = 1, .sample_count = 1});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call->Compute(**kernel, 1).ok());
  EXPECT_EQ(TokenValues(call->output(0)),
            (std::vector<int64_t>{tokens_[9], tokens_[10], tokens_[11]}));
  EXPECT_EQ(TokenValues(call->output(1)),
            (std::vector<int64_t>{tokens_[10], tokens_[11], tokens_[12]}));
}

TEST_F(TokenBatchTest, OffsetsWrapAndHugePiecesDoNotOverflow) {
  BatchConfig config{.path = path_, .global_batch = 3, .sequence = 7, .sample_count = 3};
  CheckAgainstFormula(config, /*steps=*/50);

  std::unique_ptr<OpCall> call = MakeCall(config);
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  for (int64_t piece : {int64_t{1} << 40, (int64_t{1} << 62) + 12345, INT64_MAX}) {
    ASSERT_TRUE(call->Compute(**kernel, piece).ok());
    EXPECT_EQ(TokenValues(call->output(0)), ExpectedRows(tokens_, 3, 7, piece, 0, 3, 0)) << piece;
    EXPECT_EQ(TokenValues(call->output(1)), ExpectedRows(tokens_, 3, 7, piece, 0, 3, 1)) << piece;
  }
  EXPECT_THAT(call->Compute(**kernel, -1).message(), HasSubstr("piece must be >= 0"));
}

TEST_F(TokenBatchTest, UnionOverRanksAndMicroBatchesIsTheGlobalBatch) {
  constexpr int64_t kBatch = 12;
  constexpr int64_t kSequence = 4;
  constexpr int64_t kRanks = 3;
  constexpr int64_t kMicroBatches = 2;
  constexpr int64_t kPerRank = kBatch / kRanks;
  constexpr int64_t kPerPiece = kPerRank / kMicroBatches;

  std::unique_ptr<OpCall> global = MakeCall({.path = path_,
                                             .global_batch = kBatch,
                                             .sequence = kSequence,
                                             .sample_count = kBatch,
                                             .data_type = plan::INT64});
  absl::StatusOr<std::unique_ptr<Kernel>> global_kernel = BuildDataKernel(*global);
  ASSERT_TRUE(global_kernel.ok()) << global_kernel.status();

  std::vector<std::unique_ptr<OpCall>> calls;
  std::vector<std::unique_ptr<Kernel>> kernels;
  for (int64_t rank = 0; rank < kRanks; ++rank) {
    calls.push_back(MakeCall({.path = path_,
                              .global_batch = kBatch,
                              .sequence = kSequence,
                              .sample_begin = rank * kPerRank,
                              .sample_count = kPerRank,
                              .micro_batches = kMicroBatches,
                              .data_type = plan::INT64}));
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*calls.back());
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    kernels.push_back(*std::move(kernel));
  }

  for (int64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(global->Compute(**global_kernel, step).ok());
    const std::vector<int64_t> global_x = TokenValues(global->output(0));
    const std::vector<int64_t> global_y = TokenValues(global->output(1));
    std::vector<int64_t> union_x(global_x.size(), -1);
    std::vector<int64_t> union_y(global_y.size(), -1);
    for (int64_t rank = 0; rank < kRanks; ++rank) {
      for (int64_t micro_batch = 0; micro_batch < kMicroBatches; ++micro_batch) {
        OpCall& call = *calls[rank];
        ASSERT_TRUE(call.Compute(*kernels[rank], step * kMicroBatches + micro_batch).ok());
        const std::vector<int64_t> x = TokenValues(call.output(0));
        const std::vector<int64_t> y = TokenValues(call.output(1));
        const int64_t first = rank * kPerRank + micro_batch * kPerPiece;
        for (int64_t k = 0; k < kPerPiece * kSequence; ++k) {
          // Every position is written exactly once.
          EXPECT_EQ(union_x[first * kSequence + k], -1);
          union_x[first * kSequence + k] = x[k];
          union_y[first * kSequence + k] = y[k];
        }
      }
    }
    EXPECT_EQ(union_x, global_x) << "step " << step;
    EXPECT_EQ(union_y, global_y) << "step " << step;
  }
}

// A token file of `format` holding `tokens`: ranks, micro-batches and steps read what the formula
// says, into int32 and int64 outputs.
void TokenBatchTest::CheckFormatAgainstFormula(const std::string& path, const std::string& format,
                                               const std::vector<int64_t>& tokens) {
  tokens_ = tokens;
  for (plan::DataType data_type : {plan::INT32, plan::INT64}) {
    CheckAgainstFormula({.path = path,
                         .format = format,
                         .global_batch = 4,
                         .sequence = 6,
                         .sample_begin = 2,
                         .sample_count = 2,
                         .micro_batches = 2,
                         .data_type = data_type},
                        /*steps=*/8);
  }
}

TEST_F(TokenBatchTest, Uint16Format) {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> tokens;
  for (int k = 0; k < 61; ++k) {
    const uint16_t token = static_cast<uint16_t>((k * 4099 + 513) % 65536);
    tokens.push_back(token);
    bytes.push_back(static_cast<uint8_t>(token & 0xff));
    bytes.push_back(static_cast<uint8_t>(token >> 8));
  }
  const std::string path = Created("tokens.u16", bytes);
  CheckFormatAgainstFormula(path, "uint16", tokens);
  // Little-endian: the first token of step 0, sample 0 is bytes 0 and 1.
  std::unique_ptr<OpCall> call =
      MakeCall({.path = path, .format = "uint16", .global_batch = 1, .sample_count = 1});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call->Compute(**kernel, 0).ok());
  EXPECT_EQ(TokenValues(call->output(0))[0], bytes[0] | (bytes[1] << 8));
  EXPECT_GT(*std::max_element(tokens.begin(), tokens.end()), 255);
}

TEST_F(TokenBatchTest, Uint32Format) {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> tokens;
  for (int k = 0; k < 61; ++k) {
    // Vocabularies past 65536 (and one token past 2^24 to see every byte).
    const uint32_t token =
        k == 7 ? (1u << 24) + 3 : static_cast<uint32_t>((k * 40'099 + 513) % 200'000);
    tokens.push_back(token);
    for (int shift : {0, 8, 16, 24}) bytes.push_back(static_cast<uint8_t>(token >> shift));
  }
  const std::string path = Created("tokens.u32", bytes);
  CheckFormatAgainstFormula(path, "uint32", tokens);
  EXPECT_GT(*std::max_element(tokens.begin(), tokens.end()), 65535);
}

TEST_F(TokenBatchTest, Uint32TokensBeyondTheOutputTypeFailTheAct) {
  std::vector<uint8_t> bytes;
  for (int k = 0; k < 12; ++k) {
    const uint32_t token = k == 1 ? 0x80000001u : static_cast<uint32_t>(k);
    for (int shift : {0, 8, 16, 24}) bytes.push_back(static_cast<uint8_t>(token >> shift));
  }
  const std::string path = Created("huge.u32", bytes);
  std::unique_ptr<OpCall> call = MakeCall(
      {.path = path, .format = "uint32", .global_batch = 1, .sequence = 4, .sample_count = 1});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  absl::Status status = call->Compute(**kernel, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("holds token 2147483649 at token 1"));
  EXPECT_THAT(status.message(), HasSubstr("huge.u32"));
  // A size that is not a whole number of uint32 tokens.
  const std::string ragged = Created("ragged.u32", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  status = BuildError({.path = ragged, .format = "uint32", .sequence = 2});
  EXPECT_THAT(status.message(), HasSubstr("10 bytes, which is not a whole number of uint32"));
}

TEST_F(TokenBatchTest, DefaultsAreBytesWholeBatchOneMicroBatch) {
  OpCall call("token_batch");
  call.Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(3))
      .Attribute("sequence", IntAttribute(4))
      .Output({3, 4}, plan::INT32)
      .Output({3, 4}, plan::INT32);
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call.Compute(**kernel, 2).ok());
  EXPECT_EQ(TokenValues(call.output(0)), ExpectedRows(tokens_, 3, 4, 2, 0, 3, 0));
  EXPECT_EQ(TokenValues(call.output(1)), ExpectedRows(tokens_, 3, 4, 2, 0, 3, 1));
}

TEST_F(TokenBatchTest, SmallestFileHoldsSequencePlusTwoTokens) {
  // N = T + 2: the modulus is 1, so every sample starts at 0.
  const std::string path = Created("smallest.bin", {1, 2, 3, 4, 5, 6, 7});
  std::unique_ptr<OpCall> call =
      MakeCall({.path = path, .global_batch = 2, .sequence = 5, .sample_count = 2});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call->Compute(**kernel, 3).ok());
  EXPECT_EQ(TokenValues(call->output(0)), (std::vector<int64_t>{1, 2, 3, 4, 5, 1, 2, 3, 4, 5}));
  EXPECT_EQ(TokenValues(call->output(1)), (std::vector<int64_t>{2, 3, 4, 5, 6, 2, 3, 4, 5, 6}));
}

TEST_F(TokenBatchTest, MissingFileNamesThePath) {
  const std::string path = TempPath("does_not_exist.bin");
  absl::Status status = BuildError({.path = path});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("token_batch"));
  EXPECT_THAT(status.message(), HasSubstr("test_task"));
}

TEST_F(TokenBatchTest, DirectoryIsRejected) {
  absl::Status status = BuildError({.path = ::testing::TempDir()});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("not a regular file"));
}

TEST_F(TokenBatchTest, EmptyFileIsRejected) {
  const std::string path = Created("empty.bin", {});
  absl::Status status = BuildError({.path = path});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("is empty"));
}

TEST_F(TokenBatchTest, TooShortFileIsRejected) {
  // T + 1 tokens: one short.
  const std::string path = Created("short.bin", {1, 2, 3, 4, 5, 6});
  absl::Status status = BuildError({.path = path, .sequence = 5});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("holds 6 tokens"));
  EXPECT_THAT(status.message(), HasSubstr("at least 7"));

  // The same file in uint16 holds 3 tokens.
  status = BuildError({.path = path, .format = "uint16", .sequence = 2});
  EXPECT_THAT(status.message(), HasSubstr("holds 3 tokens"));
}

TEST_F(TokenBatchTest, OddSizedUint16FileIsRejected) {
  const std::string path = Created("odd.u16", {1, 2, 3, 4, 5, 6, 7, 8, 9});
  absl::Status status = BuildError({.path = path, .format = "uint16", .sequence = 2});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("9 bytes, which is not a whole number of uint16 tokens"));
}

TEST_F(TokenBatchTest, BadFormatName) {
  absl::Status status = BuildError({.path = path_, .format = "int16"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("'format' must be \"bytes\", \"uint16\" or \"uint32\""));
  EXPECT_THAT(status.message(), HasSubstr("int16"));
}

TEST_F(TokenBatchTest, MicroBatchesMustDivideSampleCount) {
  absl::Status status =
      BuildError({.path = path_, .sample_count = 6, .micro_batches = 4, .rows = 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("sample_count 6 is not divisible by micro_batches 4"));

  status = BuildError({.path = path_, .micro_batches = 0, .rows = 8});
  EXPECT_THAT(status.message(), HasSubstr("'micro_batches' must be >= 1"));
}

TEST_F(TokenBatchTest, OutputShapeMismatch) {
  // Two micro-batches of 8 samples give 4 rows, not 8.
  absl::Status status = BuildError({.path = path_, .micro_batches = 2, .rows = 8});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("output 'x' is int32[8, 5]"));
  EXPECT_THAT(status.message(), HasSubstr("[4, 5]"));

  // y alone differs: a longer sequence.
  OpCall call("token_batch");
  call.Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(2))
      .Attribute("sequence", IntAttribute(4))
      .Output({2, 4}, plan::INT32)
      .Output({2, 5}, plan::INT32);
  status = BuildDataKernel(call).status();
  EXPECT_THAT(status.message(), HasSubstr("output 'y' is int32[2, 5]"));

  // A rank-1 output.
  OpCall flat("token_batch");
  flat.Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(2))
      .Attribute("sequence", IntAttribute(4))
      .Output({8}, plan::INT32)
      .Output({8}, plan::INT32);
  status = BuildDataKernel(flat).status();
  EXPECT_THAT(status.message(), HasSubstr("must be [sample_count / micro_batches, sequence]"));
}

TEST_F(TokenBatchTest, OutputDataTypeMustBeInt32OrInt64) {
  absl::Status status = BuildError({.path = path_, .data_type = plan::FLOAT32});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("output 'x' must be int32 or int64, got float32"));

  // Mixed int32 x and int64 y is fine.
  OpCall call("token_batch");
  call.Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(2))
      .Attribute("sequence", IntAttribute(4))
      .Output({2, 4}, plan::INT32)
      .Output({2, 4}, plan::INT64);
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call.Compute(**kernel, 1).ok());
  EXPECT_EQ(TokenValues(call.output(0)), ExpectedRows(tokens_, 2, 4, 1, 0, 2, 0));
  EXPECT_EQ(TokenValues(call.output(1)), ExpectedRows(tokens_, 2, 4, 1, 0, 2, 1));
}

TEST_F(TokenBatchTest, SampleWindowMustLieInsideTheGlobalBatch) {
  for (auto [begin, count] : {std::pair<int64_t, int64_t>{6, 4}, {-1, 2}, {0, 9}, {9, 0}}) {
    absl::Status status =
        BuildError({.path = path_, .sample_begin = begin, .sample_count = count, .rows = count});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("do not select a window of the global batch of 8"))
        << begin << " " << count;
  }
}

TEST_F(TokenBatchTest, AttributeAndArityErrors) {
  OpCall no_path("token_batch");
  no_path.Attribute("global_batch", IntAttribute(2))
      .Attribute("sequence", IntAttribute(4))
      .Output({2, 4}, plan::INT32)
      .Output({2, 4}, plan::INT32);
  EXPECT_THAT(BuildDataKernel(no_path).status().message(), HasSubstr("missing attribute 'path'"));

  EXPECT_THAT(BuildError({.path = path_, .global_batch = 0, .sample_count = 0}).message(),
              HasSubstr("'global_batch' must be >= 1"));
  EXPECT_THAT(BuildError({.path = path_, .sequence = 0}).message(),
              HasSubstr("'sequence' must be >= 1"));

  // One output (x, or y with "targets") and two (x, y) are the forms; three is neither.
  OpCall three_outputs("token_batch");
  three_outputs.Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(2))
      .Attribute("sequence", IntAttribute(4))
      .Output({2, 4}, plan::INT32)
      .Output({2, 4}, plan::INT32)
      .Output({2, 4}, plan::INT32);
  EXPECT_THAT(BuildDataKernel(three_outputs).status().message(),
              HasSubstr("expects 0 inputs and 2 outputs"));

  OpCall with_input("token_batch");
  with_input.Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(2))
      .Attribute("sequence", IntAttribute(4))
      .Input(Int32Tensor({1}, {0}))
      .Output({2, 4}, plan::INT32)
      .Output({2, 4}, plan::INT32);
  EXPECT_THAT(BuildDataKernel(with_input).status().message(),
              HasSubstr("expects 0 inputs and 2 outputs"));
}

TEST_F(TokenBatchTest, RealTextFile) {
  const std::vector<uint8_t> text = ReadFile(kGplPath);
  if (text.empty()) GTEST_SKIP() << kGplPath << " is not installed";
  constexpr int64_t kBatch = 8;
  constexpr int64_t kSequence = 64;
  const int64_t num_tokens = static_cast<int64_t>(text.size());

  std::unique_ptr<OpCall> call = MakeCall({.path = kGplPath,
                                           .global_batch = kBatch,
                                           .sequence = kSequence,
                                           .sample_count = kBatch,
                                           .data_type = plan::INT64});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call->Compute(**kernel, 0).ok());
  const std::vector<int64_t> x = TokenValues(call->output(0));
  const std::vector<int64_t> y = TokenValues(call->output(1));
  for (int64_t sample = 0; sample < kBatch; ++sample) {
    const int64_t offset = (sample * kSequence) % (num_tokens - kSequence - 1);
    for (int64_t k = 0; k < kSequence; ++k) {
      ASSERT_EQ(x[sample * kSequence + k], text[offset + k]) << sample << " " << k;
      ASSERT_EQ(y[sample * kSequence + k], text[offset + k + 1]) << sample << " " << k;
    }
  }
  // The GPL starts with its title, centred.
  std::string first_row;
  for (int64_t k = 0; k < kSequence; ++k) first_row.push_back(static_cast<char>(x[k]));
  EXPECT_THAT(first_row, HasSubstr("GNU GENERAL PUBLIC LICENSE"));
}

TEST(DataKernelsRegistrationTest, TokenBatchIsAmongTheCpuKernels) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  EXPECT_TRUE(registry.Contains("token_batch", plan::CPU));
  EXPECT_TRUE(registry.Contains("matmul", plan::CPU));
  EXPECT_EQ(RegisterCpuDataKernels(&registry).code(), absl::StatusCode::kAlreadyExists);
}

// Issue 56: a token file is opened through KernelInit::files, only beneath its roots.
TEST_F(TokenBatchTest, FileOutsideTheRootsIsRefusedNamingPathAndRoots) {
  const std::string root = TempPath("root");
  std::filesystem::create_directory(root);
  absl::StatusOr<FileRoots> roots = FileRoots::Beneath({root}, "--data-root");
  ASSERT_TRUE(roots.ok()) << roots.status();
  std::unique_ptr<OpCall> call = MakeCall({.path = path_});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call, &*roots);
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kPermissionDenied) << kernel.status();
  EXPECT_THAT(kernel.status().message(), HasSubstr(path_));
  EXPECT_THAT(kernel.status().message(),
              HasSubstr(std::filesystem::path(root).lexically_normal().string()));
  EXPECT_THAT(kernel.status().message(), HasSubstr("--data-root"));

  // The same file beneath the root is read.
  const std::string inside = root + "/tokens.bin";
  WriteFile(inside, bytes_);
  std::unique_ptr<OpCall> inside_call = MakeCall({.path = inside});
  kernel = BuildDataKernel(*inside_call, &*roots);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_TRUE(inside_call->Compute(**kernel, 0).ok());
  std::filesystem::remove_all(root);
}

TEST_F(TokenBatchTest, NoFilesMeansNoTokenFile) {
  std::unique_ptr<OpCall> call = MakeCall({.path = path_});
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = registry.Create(plan::CPU, call->Init());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kPermissionDenied) << kernel.status();
  EXPECT_THAT(kernel.status().message(), HasSubstr(path_));
}

// Issue 56 finding 4: truncating the file while a job reads it used to kill the process (SIGBUS on
// the mapping); now the act fails with DATA_LOSS naming the file.
TEST_F(TokenBatchTest, FileTruncatedAfterBuildingFailsTheActNotTheProcess) {
  std::unique_ptr<OpCall> call = MakeCall({.path = path_, .global_batch = 8, .sequence = 5});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call->Compute(**kernel, 0).ok());
  ASSERT_EQ(::truncate(path_.c_str(), 3), 0);
  absl::Status status = absl::OkStatus();
  for (int64_t piece = 1; piece < 20 && status.ok(); ++piece)
    status = call->Compute(**kernel, piece);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
}

// Issue 56 finding 3: a FIFO as token file used to block open() for good.
TEST_F(TokenBatchTest, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  created_.push_back(fifo);
  absl::Status status = BuildError({.path = fifo});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("a FIFO"));
}

TEST_F(TokenBatchTest, ReadStopsOnceTheJobIsEnding) {
  std::atomic<bool> ending{false};
  std::unique_ptr<OpCall> call = MakeCall({.path = path_});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call, nullptr, &ending);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE(call->Compute(**kernel, 0).ok());
  ending = true;
  absl::Status status = call->Compute(**kernel, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

}  // namespace
}  // namespace loom::kernel_test
