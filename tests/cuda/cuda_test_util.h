#ifndef LOOM_TESTS_CUDA_CUDA_TEST_UTIL_H_
#define LOOM_TESTS_CUDA_CUDA_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "device/cuda/cuda_stream_context.h"
#include "gtest/gtest.h"
#include "kernels/kernel_registry.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::cuda_test {

// Skips the test, saying why, when this machine has no usable GPU (CI has none).
#define LOOM_SKIP_WITHOUT_GPU()                                                   \
  do {                                                                            \
    if (std::string reason = ::loom::cuda_test::NoGpuReason(); !reason.empty()) { \
      GTEST_SKIP() << reason;                                                     \
    }                                                                             \
  } while (false)

// Empty when cuda:0 is usable; otherwise why not.
std::string NoGpuReason();

// Registries filled with the CPU kernels and with the CUDA kernels (built once per process).
const KernelRegistry& Kernels();

// A stream on cuda:0 for kernel tests.
cuda::CudaStreamContext& TestStream();

// float32 <-> bfloat16 (round to nearest even) on the host.
HostTensor ToBfloat16(const HostTensor& float32);
HostTensor ToFloat32(const HostTensor& bfloat16);

// Runs `call`'s op through the CUDA kernel on cuda:0: its inputs are copied to the GPU (as
// `data_type` when it is BFLOAT16 and they are float32; outputs likewise), the kernel runs on
// TestStream(), and the outputs come back (as float32 when they ran as bfloat16).
absl::StatusOr<std::vector<HostTensor>> RunOnCuda(const kernel_test::OpCall& call,
                                                  plan::DataType data_type = plan::FLOAT32);

// Expects `actual` (a CUDA kernel's output, float32 or integer) to be `expected` (the CPU's):
// integers exactly; floats within `tolerance` (absolute, plus relative to the CPU value), and with
// tolerance 0 bit for bit (or both NaN).
void ExpectSameTensor(const HostTensor& expected, const HostTensor& actual, float tolerance);

// Runs `call` on the CPU kernel (through call.Run()) and on the CUDA kernel, and expects every
// output to agree: integer outputs exactly, float outputs within `tolerance` (absolute, plus
// relative to the CPU value). With BFLOAT16 the CUDA kernel sees the inputs rounded to bfloat16
// and the CPU kernel the same rounded values in float32.
void ExpectCudaMatchesCpu(kernel_test::OpCall& call, float tolerance,
                          plan::DataType data_type = plan::FLOAT32);

// Row lengths: one element, fewer than a warp, not a multiple of the block, and longer than the
// largest block.
const std::vector<int64_t>& RowLengths();

// `count` indices in [0, bound) from a fixed seed; every `ignore_every`th (when > 0) is `ignore`.
std::vector<int64_t> RandomIndices(int64_t count, int64_t bound, uint32_t seed,
                                   int ignore_every = 0, int64_t ignore = -100);

// `values` as an INT64 tensor, or INT32 for any other `data_type`.
HostTensor IndexTensor(const Shape& shape, const std::vector<int64_t>& values,
                       plan::DataType data_type);

// Builds `call`'s CUDA kernel and runs it three times on GPU copies of the call's tensors, waiting
// for the stream after each act; returns the statuses of the second and third acts.
std::vector<absl::Status> ComputeThriceOnCuda(kernel_test::OpCall& call);

// Builds `call` through the CUDA registry on the test stream, its float32 tensors as
// `float_type`; returns the status.
absl::Status BuildOnCuda(const kernel_test::OpCall& call,
                         plan::DataType float_type = plan::FLOAT32);

}  // namespace loom::cuda_test

#endif  // LOOM_TESTS_CUDA_CUDA_TEST_UTIL_H_
