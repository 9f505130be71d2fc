#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/scoped_device.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/optimizers/optimizer_checks.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/optimizer_kernels.h"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kSgd[] = "sgd";
constexpr char kAdamW[] = "adamw";
constexpr char kSquaredNorm[] = "squared_norm";
constexpr char kClipCoefficient[] = "clip_coefficient";
constexpr char kScaleBy[] = "scale_by";

constexpr int kThreads = 256;
// The most blocks of the first pass of squared_norm (the size of its scratch of partial sums).
constexpr int64_t kMaxPartials = 1024;
// What clip_grad_norm_ adds to the norm before dividing (as the CPU kernel).
constexpr float kNormEpsilon = 1e-6f;

// ---------------------------------------------------------------------------------------------
// Device side. Every float operation is spelled with a correctly rounded intrinsic so that nvcc
// contracts nothing beyond the explicit __fmaf_rn calls, which stand where the CPU kernels call
// std::fma.

__device__ __forceinline__ int64_t FirstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

struct SgdScalars {
  bool use_weight_decay;
  bool use_momentum;
  bool nesterov;
  // Step 1 of training: the momentum buffer becomes the gradient.
  bool first_step;
  float weight_decay;
  float momentum;
  float one_minus_dampening;
  float negative_lr;
};

// Outputs may alias their inputs: each thread reads an element before writing it.
__global__ void SgdElements(const float* param, const float* grad, const float* buffer,
                            float* param_out, float* buffer_out, int64_t count, SgdScalars k) {
  for (int64_t i = FirstThread(); i < count; i += GridThreads()) {
    const float p = param[i];
    float g = grad[i];
    if (k.use_weight_decay) g = __fmaf_rn(p, k.weight_decay, g);
    if (k.use_momentum) {
      const float b =
          k.first_step ? g : __fmaf_rn(g, k.one_minus_dampening, __fmul_rn(buffer[i], k.momentum));
      buffer_out[i] = b;
      g = k.nesterov ? __fmaf_rn(b, k.momentum, g) : b;
    } else {
      buffer_out[i] = buffer[i];
    }
    param_out[i] = __fmaf_rn(g, k.negative_lr, p);
  }
}

struct AdamWScalars {
  float decay;
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float correction2_sqrt;
  float epsilon;
  float negative_step_size;
};

// The CPU kernel's element loop (kernels/cpu/optimizers/adamw_kernel.cc, compiled there with
// -ffp-contract=off), operation for operation.
__global__ void AdamWElements(const float* param, const float* grad, const float* exp_avg,
                              const float* exp_avg_sq, float* param_out, float* exp_avg_out,
                              float* exp_avg_sq_out, int64_t count, AdamWScalars k) {
  for (int64_t i = FirstThread(); i < count; i += GridThreads()) {
    const float p = param[i];
    const float g = grad[i];
    const float decayed = __fmul_rn(p, k.decay);
    const float m = __fmaf_rn(g, k.one_minus_beta1, __fmul_rn(exp_avg[i], k.beta1));
    const float v =
        __fmaf_rn(__fmul_rn(k.one_minus_beta2, g), g, __fmul_rn(exp_avg_sq[i], k.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.correction2_sqrt), k.epsilon);
    param_out[i] = __fadd_rn(decayed, __fdiv_rn(__fmul_rn(k.negative_step_size, m), denom));
    exp_avg_out[i] = m;
    exp_avg_sq_out[i] = v;
  }
}

// Sums the `count` doubles of shared[0, kThreads) into shared[0] in a fixed tree order.
__device__ __forceinline__ void BlockSum(double* shared) {
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + stride]);
    }
    __syncthreads();
  }
}

// Pass 1: partials[block] = the sum of the squares (in double) of the elements this block's
// threads stride over.
__global__ void __launch_bounds__(kThreads)
    SquaredNormPartials(const float* input, int64_t count, double* partials) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  for (int64_t i = FirstThread(); i < count; i += GridThreads()) {
    const double value = input[i];
    sum = __dadd_rn(sum, __dmul_rn(value, value));
  }
  shared[threadIdx.x] = sum;
  __syncthreads();
  BlockSum(shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

// Pass 2 (one block): output[0] = the sum of the partials, rounded to float32.
__global__ void __launch_bounds__(kThreads)
    SquaredNormFinish(const double* partials, int64_t count, float* output) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) sum = __dadd_rn(sum, partials[i]);
  shared[threadIdx.x] = sum;
  __syncthreads();
  BlockSum(shared);
  if (threadIdx.x == 0) output[0] = __double2float_rn(shared[0]);
}

// min(1, max_norm / (sqrt(total_squared_norm) + 1e-6)) as the CPU kernel evaluates it:
// (1 / (total_norm + 1e-6)) * max_norm, then clamped to at most 1 (NaN stays NaN).
__global__ void ClipCoefficientElement(const float* total_squared_norm, float* output,
                                       float max_norm) {
  const float total_norm = __fsqrt_rn(total_squared_norm[0]);
  const float coefficient =
      __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(total_norm, kNormEpsilon)), max_norm);
  // std::min(coefficient, 1.0f) is (1.0f < coefficient) ? 1.0f : coefficient.
  output[0] = isnan(coefficient) ? coefficient : (1.0f < coefficient ? 1.0f : coefficient);
}

// output may be input.
__global__ void ScaleByElements(const float* input, const float* coefficient, float* output,
                                int64_t count) {
  const float factor = coefficient[0];
  for (int64_t i = FirstThread(); i < count; i += GridThreads()) {
    output[i] = __fmul_rn(input[i], factor);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

unsigned int Blocks(int64_t count) { return static_cast<unsigned int>(BlocksFor(count, kThreads)); }

std::string LaunchWhat(const std::string& task_name, absl::string_view op_type) {
  return absl::StrCat("task '", task_name, "': ", std::string(op_type));
}
struct SgdOptions {
  cpu::ScheduledLearningRate lr;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  int64_t first_step = 0;
};

// The float attribute `name` (finite) into *value, which holds its default.
absl::Status ReadOptional(absl::string_view op_type, const Attributes& attributes,
                          const std::string& name, double* value) {
  absl::StatusOr<double> read = cpu::GetFiniteFloat(op_type, attributes, name, *value);
  if (!read.ok()) return read.status();
  *value = *read;
  return absl::OkStatus();
}

// The CPU kernel's attribute reading (kernels/cpu/optimizers/sgd_kernel.cc): same checks, same
// order, same messages.
absl::StatusOr<SgdOptions> ReadSgdOptions(const plan::KernelConf& conf) {
  const Attributes attributes(conf);
  SgdOptions options;
  absl::StatusOr<cpu::ScheduledLearningRate> lr = cpu::GetLearningRate(kSgd, attributes);
  if (!lr.ok()) return lr.status();
  options.lr = *lr;
  if (absl::Status status = ReadOptional(kSgd, attributes, "momentum", &options.momentum);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckNonNegative(kSgd, "momentum", options.momentum);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = ReadOptional(kSgd, attributes, "dampening", &options.dampening);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = ReadOptional(kSgd, attributes, "weight_decay", &options.weight_decay);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckNonNegative(kSgd, "weight_decay", options.weight_decay);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<bool> nesterov = attributes.GetBool("nesterov", false);
  if (!nesterov.ok()) return cpu::WithOpType(kSgd, nesterov.status());
  options.nesterov = *nesterov;
  absl::StatusOr<int64_t> first_step = cpu::GetFirstStep(kSgd, attributes);
  if (!first_step.ok()) return first_step.status();
  options.first_step = *first_step;
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    return absl::InvalidArgumentError(
        "sgd: nesterov momentum requires a positive 'momentum' and zero 'dampening'");
  }
  return options;
}

class SgdKernel : public Kernel {
 public:
  SgdKernel(const KernelInit& init, const SgdOptions& options, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        stream_(stream),
        first_step_(options.first_step),
        lr_(options.lr),
        scalars_{options.weight_decay != 0.0,
                 options.momentum != 0.0,
                 options.nesterov,
                 false,
                 static_cast<float>(options.weight_decay),
                 static_cast<float>(options.momentum),
                 static_cast<float>(1.0 - options.dampening),
                 0.0f} {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kSgd, context); !status.ok()) return status;
    if (absl::Status status = cpu::CheckStepPiece(kSgd, context.piece); !status.ok()) return status;
    const int64_t count = context.outputs[0].NumElements();
    if (count == 0) return absl::OkStatus();
    SgdScalars scalars = scalars_;
    // PyTorch sets the buffer to the gradient on the very first step only; a resumed run
    // (first_step > 0) continues from the buffer it was given.
    scalars.first_step = first_step_ == 0 && context.piece == 0;
    scalars.negative_lr = static_cast<float>(-lr_.At(first_step_ + context.piece));
    SgdElements<<<Blocks(count), kThreads, 0, stream_->stream()>>>(
        context.inputs[0].Data<const float>(), context.inputs[1].Data<const float>(),
        context.inputs[2].Data<const float>(), context.outputs[0].Data<float>(),
        context.outputs[1].Data<float>(), count, scalars);
    return LaunchStatus(LaunchWhat(task_name_, kSgd));
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const int64_t first_step_;
  const cpu::ScheduledLearningRate lr_;
  // Every scalar but the learning rate, which the schedule gives per step.
  const SgdScalars scalars_;
};

struct AdamWOptions {
  cpu::ScheduledLearningRate lr;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
  int64_t first_step = 0;
};

// The CPU kernel's attribute reading (kernels/cpu/optimizers/adamw_kernel.cc).
absl::StatusOr<AdamWOptions> ReadAdamWOptions(const plan::KernelConf& conf) {
  const Attributes attributes(conf);
  AdamWOptions options;
  absl::StatusOr<cpu::ScheduledLearningRate> lr = cpu::GetLearningRate(kAdamW, attributes);
  if (!lr.ok()) return lr.status();
  options.lr = *lr;
  if (absl::Status status = ReadOptional(kAdamW, attributes, "beta1", &options.beta1);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckDecayRate(kAdamW, "beta1", options.beta1); !status.ok()) {
    return status;
  }
  if (absl::Status status = ReadOptional(kAdamW, attributes, "beta2", &options.beta2);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckDecayRate(kAdamW, "beta2", options.beta2); !status.ok()) {
    return status;
  }
  if (absl::Status status = ReadOptional(kAdamW, attributes, "epsilon", &options.epsilon);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckNonNegative(kAdamW, "epsilon", options.epsilon);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = ReadOptional(kAdamW, attributes, "weight_decay", &options.weight_decay);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckNonNegative(kAdamW, "weight_decay", options.weight_decay);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> first_step = cpu::GetFirstStep(kAdamW, attributes);
  if (!first_step.ok()) return first_step.status();
  options.first_step = *first_step;
  return options;
}

class AdamWKernel : public Kernel {
 public:
  AdamWKernel(const KernelInit& init, const AdamWOptions& options, CudaStreamContext* stream)
      : task_name_(init.task_name), signature_(init), options_(options), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kAdamW, context); !status.ok()) return status;
    if (absl::Status status = cpu::CheckStepPiece(kAdamW, context.piece); !status.ok()) {
      return status;
    }
    const int64_t count = context.outputs[0].NumElements();
    if (count == 0) return absl::OkStatus();
    // The scalars exactly as the CPU kernel computes them (Python floats, then float32).
    const double step =
        static_cast<double>(options_.first_step) + static_cast<double>(context.piece) + 1.0;
    const double lr = options_.lr.At(options_.first_step + context.piece);
    const double bias_correction1 = 1.0 - std::pow(options_.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(options_.beta2, step);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    const AdamWScalars scalars{static_cast<float>(1.0 - lr * options_.weight_decay),
                               static_cast<float>(options_.beta1),
                               static_cast<float>(1.0 - options_.beta1),
                               static_cast<float>(options_.beta2),
                               static_cast<float>(1.0 - options_.beta2),
                               static_cast<float>(bias_correction2_sqrt),
                               static_cast<float>(options_.epsilon),
                               static_cast<float>(-step_size)};
    AdamWElements<<<Blocks(count), kThreads, 0, stream_->stream()>>>(
        context.inputs[0].Data<const float>(), context.inputs[1].Data<const float>(),
        context.inputs[2].Data<const float>(), context.inputs[3].Data<const float>(),
        context.outputs[0].Data<float>(), context.outputs[1].Data<float>(),
        context.outputs[2].Data<float>(), count, scalars);
    return LaunchStatus(LaunchWhat(task_name_, kAdamW));
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const AdamWOptions options_;
  CudaStreamContext* const stream_;
};

class SquaredNormKernel : public Kernel {
 public:
  SquaredNormKernel(const KernelInit& init, CudaStreamContext* stream)
      : task_name_(init.task_name), signature_(init), stream_(stream) {}

  ~SquaredNormKernel() override {
    if (partials_ != nullptr) {
      ScopedDevice device(stream_->device());
      cudaFree(partials_);
    }
  }

  SquaredNormKernel(const SquaredNormKernel&) = delete;
  SquaredNormKernel& operator=(const SquaredNormKernel&) = delete;

  // The scratch of partial sums, once, on the stream's device.
  absl::Status Allocate() {
    const std::string what = LaunchWhat(task_name_, kSquaredNorm);
    ScopedDevice device(stream_->device());
    if (absl::Status status =
            CudaStatus(device.error(), absl::StrCat(what, ": selecting cuda:", stream_->device()));
        !status.ok()) {
      return status;
    }
    absl::Status status =
        CudaStatus(cudaMalloc(reinterpret_cast<void**>(&partials_), kMaxPartials * sizeof(double)),
                   absl::StrCat(what, ": allocating the partial sums"));
    if (!status.ok()) partials_ = nullptr;
    return status;
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kSquaredNorm, context); !status.ok()) return status;
    const int64_t count = context.inputs[0].NumElements();
    // At least one block, so that an empty input writes 0.
    const int64_t blocks = std::min<int64_t>(BlocksFor(count, kThreads), kMaxPartials);
    SquaredNormPartials<<<static_cast<unsigned int>(blocks), kThreads, 0, stream_->stream()>>>(
        context.inputs[0].Data<const float>(), count, partials_);
    if (absl::Status status = LaunchStatus(LaunchWhat(task_name_, kSquaredNorm)); !status.ok()) {
      return status;
    }
    SquaredNormFinish<<<1, kThreads, 0, stream_->stream()>>>(partials_, blocks,
                                                             context.outputs[0].Data<float>());
    return LaunchStatus(LaunchWhat(task_name_, kSquaredNorm));
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  double* partials_ = nullptr;
};

class ClipCoefficientKernel : public Kernel {
 public:
  ClipCoefficientKernel(const KernelInit& init, float max_norm, CudaStreamContext* stream)
      : task_name_(init.task_name), signature_(init), max_norm_(max_norm), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kClipCoefficient, context); !status.ok()) {
      return status;
    }
    ClipCoefficientElement<<<1, 1, 0, stream_->stream()>>>(
        context.inputs[0].Data<const float>(), context.outputs[0].Data<float>(), max_norm_);
    return LaunchStatus(LaunchWhat(task_name_, kClipCoefficient));
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const float max_norm_;
  CudaStreamContext* const stream_;
};

class ScaleByKernel : public Kernel {
 public:
  ScaleByKernel(const KernelInit& init, CudaStreamContext* stream)
      : task_name_(init.task_name), signature_(init), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kScaleBy, context); !status.ok()) return status;
    const int64_t count = context.outputs[0].NumElements();
    if (count == 0) return absl::OkStatus();
    ScaleByElements<<<Blocks(count), kThreads, 0, stream_->stream()>>>(
        context.inputs[0].Data<const float>(), context.inputs[1].Data<const float>(),
        context.outputs[0].Data<float>(), count);
    return LaunchStatus(LaunchWhat(task_name_, kScaleBy));
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
};

absl::Status CheckOneElement(absl::string_view op_type, absl::string_view name,
                             const plan::TensorDesc& desc) {
  return cpu::CheckSameShape(op_type, "a one-element tensor", Shape({1}), name,
                             Shape::FromProto(desc));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSgdKernel(const KernelInit& init) {
  absl::Status status = cpu::CheckElementwiseUpdate(
      kSgd, init, {"param", "grad", "momentum_buffer"}, {"param_out", "momentum_buffer_out"});
  if (!status.ok()) return status;
  absl::StatusOr<SgdOptions> options = ReadSgdOptions(*init.conf);
  if (!options.ok()) return options.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<SgdKernel>(init, *options, *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamWKernel(const KernelInit& init) {
  absl::Status status =
      cpu::CheckElementwiseUpdate(kAdamW, init, {"param", "grad", "exp_avg", "exp_avg_sq"},
                                  {"param_out", "exp_avg_out", "exp_avg_sq_out"});
  if (!status.ok()) return status;
  absl::StatusOr<AdamWOptions> options = ReadAdamWOptions(*init.conf);
  if (!options.ok()) return options.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<AdamWKernel>(init, *options, *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSquaredNormKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kSquaredNorm, init, 1, 1); !status.ok()) return status;
  if (absl::Status status = cpu::CheckAllFloat32(kSquaredNorm, init); !status.ok()) return status;
  if (absl::Status status = CheckOneElement(kSquaredNorm, "output", init.outputs[0]);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  auto kernel = std::make_unique<SquaredNormKernel>(init, *stream);
  if (absl::Status status = kernel->Allocate(); !status.ok()) return status;
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateClipCoefficientKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kClipCoefficient, init, 1, 1); !status.ok()) {
    return status;
  }
  if (absl::Status status = cpu::CheckAllFloat32(kClipCoefficient, init); !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckOneElement(kClipCoefficient, "input 'total_squared_norm'", init.inputs[0]);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckOneElement(kClipCoefficient, "output", init.outputs[0]);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<double> max_norm =
      cpu::GetFiniteFloat(kClipCoefficient, Attributes(*init.conf), "max_norm");
  if (!max_norm.ok()) return max_norm.status();
  if (absl::Status status = cpu::CheckPositive(kClipCoefficient, "max_norm", *max_norm);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<ClipCoefficientKernel>(init, static_cast<float>(*max_norm), *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScaleByKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kScaleBy, init, 2, 1); !status.ok()) return status;
  if (absl::Status status = cpu::CheckAllFloat32(kScaleBy, init); !status.ok()) return status;
  if (absl::Status status = CheckOneElement(kScaleBy, "input 'coefficient'", init.inputs[1]);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          cpu::CheckSameShape(kScaleBy, "input 'x'", Shape::FromProto(init.inputs[0]), "output",
                              Shape::FromProto(init.outputs[0]));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<ScaleByKernel>(init, *stream);
}

}  // namespace

absl::Status RegisterCudaOptimizerKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kSgd, CreateSgdKernel},
      {kAdamW, CreateAdamWKernel},
      {kSquaredNorm, CreateSquaredNormKernel},
      {kClipCoefficient, CreateClipCoefficientKernel},
      {kScaleBy, CreateScaleByKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
