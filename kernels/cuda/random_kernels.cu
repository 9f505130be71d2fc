#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attributes.h"
#include "kernels/cpu/counter_random.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/random_kernel.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/random_kernels.h"

namespace loom::cuda {
namespace {

constexpr char kRandom[] = "random";
constexpr char kRandomIntegers[] = "random_integers";

constexpr int kThreads = 256;
// The most axes of an output window (after unit axes are dropped and contiguous ones merged).
constexpr int kMaxWindowAxes = 16;

// Where the output's elements lie in the stream: output element i (row-major over `dimensions`)
// has counter base + sum over axes of its index along the axis times the axis's stride, all
// modulo 2^64 as on the CPU.
struct CounterWindow {
  int axes = 1;
  uint64_t dimensions[kMaxWindowAxes] = {};
  uint64_t strides[kMaxWindowAxes] = {};
  uint64_t base = 0;
};

// ---------------------------------------------------------------------------------------------
// Device side: kernels/cpu/counter_random.h, operation for operation. The integer steps wrap
// modulo 2^64 on both sides; the double steps are spelled with correctly rounded intrinsics so
// that nothing is contracted into a fused multiply-add (the CPU kernels are compiled without
// contraction).

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;
constexpr double kTwoPi = 6.283185307179586476925286766559;

__device__ __forceinline__ uint64_t MixBits(uint64_t value) {
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

__device__ __forceinline__ uint64_t RandomBits(uint64_t key, uint64_t counter, uint64_t lane) {
  return MixBits(key + (2 * counter + lane + 1) * kGoldenGamma);
}

// Uniform in [0, 1) with 53 random bits (both steps exact).
__device__ __forceinline__ double UniformFromBits(uint64_t bits) {
  return __dmul_rn(__ull2double_rn(bits >> 11), 0x1.0p-53);
}

// Uniform in (0, 1].
__device__ __forceinline__ double PositiveUniformFromBits(uint64_t bits) {
  return __dmul_rn(__ull2double_rn((bits >> 11) + 1), 0x1.0p-53);
}

// Box-Muller, cosine half. sqrt is correctly rounded on both sides; log and cos are CUDA's
// (within 1 and 2 ulp), glibc's on the CPU.
__device__ __forceinline__ double StandardNormal(uint64_t key, uint64_t counter) {
  const double radius =
      __dsqrt_rn(__dmul_rn(-2.0, log(PositiveUniformFromBits(RandomBits(key, counter, 0)))));
  return __dmul_rn(radius, cos(__dmul_rn(kTwoPi, UniformFromBits(RandomBits(key, counter, 1)))));
}

__device__ __forceinline__ uint64_t CounterOf(const CounterWindow& window, uint64_t index) {
  uint64_t counter = window.base;
  for (int axis = window.axes - 1; axis > 0; --axis) {
    const uint64_t dimension = window.dimensions[axis];
    const uint64_t outer = index / dimension;
    counter += (index - outer * dimension) * window.strides[axis];
    index = outer;
  }
  return counter + index * window.strides[0];
}

struct UniformValue {
  uint64_t key;
  double location;
  double scale;
  // The largest float below `high` (or low when the range is empty).
  float upper_bound;

  __device__ __forceinline__ float operator()(uint64_t counter) const {
    const double u = UniformFromBits(RandomBits(key, counter, 0));
    const float value = __double2float_rn(__dadd_rn(location, __dmul_rn(scale, u)));
    return value < upper_bound ? value : upper_bound;
  }
};

struct NormalValue {
  uint64_t key;
  double location;
  double scale;

  __device__ __forceinline__ float operator()(uint64_t counter) const {
    return __double2float_rn(__dadd_rn(location, __dmul_rn(scale, StandardNormal(key, counter))));
  }
};

template <typename T>
struct IntegerValue {
  uint64_t key;
  uint64_t high;

  // floor(bits * high / 2^64): the high word of the 128-bit product.
  __device__ __forceinline__ T operator()(uint64_t counter) const {
    return static_cast<T>(__umul64hi(RandomBits(key, counter, 0), high));
  }
};

template <typename T, typename Value>
__global__ void RandomElements(T* output, int64_t count, CounterWindow window, Value value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    output[i] = value(CounterOf(window, static_cast<uint64_t>(i)));
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// What "random" and "random_integers" share: the stream and where the output lies in it.
struct StreamSettings {
  uint64_t seed = 0;
  bool same_every_piece = false;
  uint64_t first_step = 0;
  CounterWindow window;

  // As the CPU kernel's StreamOptions::Key.
  uint64_t Key(int64_t piece) const {
    return cpu::RandomStreamKey(seed,
                                same_every_piece ? 0 : first_step + static_cast<uint64_t>(piece));
  }
};

// The counter window of an output of `output` at `begin` in a logical tensor of `logical`, with
// `offset` (the CPU kernel's CounterWindow::Slice, with unit axes dropped as well).
absl::StatusOr<CounterWindow> MakeWindow(const char* op_type, const Shape& output,
                                         const std::vector<int64_t>& logical,
                                         const std::vector<int64_t>& begin, uint64_t offset) {
  const int rank = output.rank();
  std::vector<uint64_t> strides(rank, 1);
  for (int axis = rank - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * static_cast<uint64_t>(logical[axis + 1]);
  }
  std::vector<uint64_t> dimensions;
  std::vector<uint64_t> merged_strides;
  uint64_t base = offset;
  for (int axis = 0; axis < rank; ++axis) {
    base += static_cast<uint64_t>(begin[axis]) * strides[axis];
    const uint64_t dimension = static_cast<uint64_t>(output.dimension(axis));
    // A unit axis adds nothing to any counter.
    if (dimension == 1) continue;
    // The previous (outer) axis steps over exactly this axis's extent: one run.
    if (!dimensions.empty() && merged_strides.back() == strides[axis] * dimension) {
      dimensions.back() *= dimension;
      merged_strides.back() = strides[axis];
      continue;
    }
    dimensions.push_back(dimension);
    merged_strides.push_back(strides[axis]);
  }
  if (dimensions.empty()) {
    dimensions.push_back(1);
    merged_strides.push_back(1);
  }
  if (dimensions.size() > static_cast<size_t>(kMaxWindowAxes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": the output window of shape ", output.ToString(), " has ", dimensions.size(),
        " axes after merging; the CUDA kernel supports at most ", kMaxWindowAxes));
  }
  CounterWindow window;
  window.axes = static_cast<int>(dimensions.size());
  for (size_t axis = 0; axis < dimensions.size(); ++axis) {
    window.dimensions[axis] = dimensions[axis];
    window.strides[axis] = merged_strides[axis];
  }
  window.base = base;
  return window;
}

// "seed", "offset", "same_every_piece", "first_step", "logical_shape" and "slice_begin", read as
// the CPU kernel reads them. The CPU factory has already accepted them; errors are passed on all
// the same.
absl::StatusOr<StreamSettings> ParseStream(const char* op_type, const plan::KernelConf& conf,
                                           const Shape& output) {
  const Attributes attributes(conf);
  StreamSettings settings;
  absl::StatusOr<int64_t> seed = attributes.GetInt("seed");
  if (!seed.ok()) return cpu::WithOpType(op_type, seed.status());
  settings.seed = static_cast<uint64_t>(*seed);
  absl::StatusOr<int64_t> offset = attributes.GetInt("offset", 0);
  if (!offset.ok()) return cpu::WithOpType(op_type, offset.status());
  absl::StatusOr<bool> same_every_piece = attributes.GetBool("same_every_piece", false);
  if (!same_every_piece.ok()) return cpu::WithOpType(op_type, same_every_piece.status());
  settings.same_every_piece = *same_every_piece;
  absl::StatusOr<int64_t> first_step = attributes.GetInt("first_step", 0);
  if (!first_step.ok()) return cpu::WithOpType(op_type, first_step.status());
  settings.first_step = static_cast<uint64_t>(*first_step);

  const int rank = output.rank();
  std::vector<int64_t> logical(output.dimensions().begin(), output.dimensions().end());
  std::vector<int64_t> begin(rank, 0);
  if (attributes.Has("logical_shape")) {
    absl::StatusOr<std::vector<int64_t>> given_logical = attributes.GetIntList("logical_shape");
    if (!given_logical.ok()) return cpu::WithOpType(op_type, given_logical.status());
    logical = *given_logical;
    if (attributes.Has("slice_begin")) {
      absl::StatusOr<std::vector<int64_t>> given_begin = attributes.GetIntList("slice_begin");
      if (!given_begin.ok()) return cpu::WithOpType(op_type, given_begin.status());
      begin = *given_begin;
    }
    if (static_cast<int>(logical.size()) != rank || static_cast<int>(begin.size()) != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": 'logical_shape' or 'slice_begin' does not match the rank of ",
                       output.ToString()));
    }
  }
  absl::StatusOr<CounterWindow> window =
      MakeWindow(op_type, output, logical, begin, static_cast<uint64_t>(*offset));
  if (!window.ok()) return window.status();
  settings.window = *window;
  return settings;
}

template <typename T, typename Value>
absl::Status Launch(const std::string& task_name, const char* op_type, cudaStream_t stream,
                    const TensorView& output, const CounterWindow& window, const Value& value) {
  const int64_t count = output.NumElements();
  if (count == 0) return absl::OkStatus();
  RandomElements<T, Value>
      <<<static_cast<unsigned int>(BlocksFor(count, kThreads)), kThreads, 0, stream>>>(
          output.Data<T>(), count, window, value);
  return LaunchStatus(absl::StrCat("task '", task_name, "': ", op_type));
}

enum class Distribution { kUniform, kNormal };

class RandomKernel : public Kernel {
 public:
  RandomKernel(const KernelInit& init, const StreamSettings& settings, Distribution distribution,
               double location, double scale, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        settings_(settings),
        distribution_(distribution),
        location_(location),
        scale_(scale),
        stream_(stream) {
    if (distribution_ == Distribution::kUniform) {
      // As the CPU kernel: rounding to float could reach `high`; the largest float below it is
      // used instead.
      const float low = static_cast<float>(location_);
      const float high = static_cast<float>(location_ + scale_);
      uniform_upper_bound_ =
          high > low ? std::nextafter(high, -std::numeric_limits<float>::infinity()) : low;
    }
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kRandom, context); !status.ok()) return status;
    const uint64_t key = settings_.Key(context.piece);
    if (distribution_ == Distribution::kUniform) {
      return Launch<float>(task_name_, kRandom, stream_->stream(), context.outputs[0],
                           settings_.window,
                           UniformValue{key, location_, scale_, uniform_upper_bound_});
    }
    return Launch<float>(task_name_, kRandom, stream_->stream(), context.outputs[0],
                         settings_.window, NormalValue{key, location_, scale_});
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const StreamSettings settings_;
  const Distribution distribution_;
  // Uniform: low + (high - low) * u. Normal: mean + std * z.
  const double location_;
  const double scale_;
  CudaStreamContext* const stream_;
  float uniform_upper_bound_ = 0.0f;
};

template <typename T>
class RandomIntegersKernel : public Kernel {
 public:
  RandomIntegersKernel(const KernelInit& init, const StreamSettings& settings, uint64_t high,
                       CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        settings_(settings),
        high_(high),
        stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kRandomIntegers, context); !status.ok()) {
      return status;
    }
    return Launch<T>(task_name_, kRandomIntegers, stream_->stream(), context.outputs[0],
                     settings_.window, IntegerValue<T>{settings_.Key(context.piece), high_});
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const StreamSettings settings_;
  const uint64_t high_;
  CudaStreamContext* const stream_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomKernel(const KernelInit& init) {
  // The CPU factory's checks, so that every configuration error reads exactly as on the CPU.
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu::CreateRandomKernel(init);
      !checked.ok()) {
    return checked.status();
  }
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<StreamSettings> settings = ParseStream(kRandom, *init.conf, output);
  if (!settings.ok()) return settings.status();
  const Attributes attributes(*init.conf);
  absl::StatusOr<std::string> distribution = attributes.GetString("distribution", "uniform");
  if (!distribution.ok()) return cpu::WithOpType(kRandom, distribution.status());
  const bool uniform = *distribution == "uniform";
  absl::StatusOr<double> first = attributes.GetFloat(uniform ? "low" : "mean", 0.0);
  if (!first.ok()) return cpu::WithOpType(kRandom, first.status());
  absl::StatusOr<double> second = attributes.GetFloat(uniform ? "high" : "std", 1.0);
  if (!second.ok()) return cpu::WithOpType(kRandom, second.status());
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  if (uniform) {
    return std::make_unique<RandomKernel>(init, *settings, Distribution::kUniform, *first,
                                          *second - *first, *stream);
  }
  return std::make_unique<RandomKernel>(init, *settings, Distribution::kNormal, *first, *second,
                                        *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomIntegersKernel(const KernelInit& init) {
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu::CreateRandomIntegersKernel(init);
      !checked.ok()) {
    return checked.status();
  }
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<StreamSettings> settings = ParseStream(kRandomIntegers, *init.conf, output);
  if (!settings.ok()) return settings.status();
  absl::StatusOr<int64_t> high = Attributes(*init.conf).GetInt("high");
  if (!high.ok()) return cpu::WithOpType(kRandomIntegers, high.status());
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  if (init.outputs[0].data_type() == plan::INT32) {
    return std::make_unique<RandomIntegersKernel<int32_t>>(init, *settings,
                                                           static_cast<uint64_t>(*high), *stream);
  }
  return std::make_unique<RandomIntegersKernel<int64_t>>(init, *settings,
                                                         static_cast<uint64_t>(*high), *stream);
}

}  // namespace

absl::Status RegisterCudaRandomKernels(KernelRegistry* registry) {
  if (absl::Status status = registry->Register(kRandom, plan::CUDA, CreateRandomKernel);
      !status.ok()) {
    return status;
  }
  return registry->Register(kRandomIntegers, plan::CUDA, CreateRandomIntegersKernel);
}

}  // namespace loom::cuda
