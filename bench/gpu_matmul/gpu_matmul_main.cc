// bench_gpu_matmul: Loom's CUDA "matmul" kernel (the kernel a compute actor runs: registry,
// factory, cuBLAS on the actor's stream) on bf16 8192 x 8192 x 8192, against torch.matmul on the
// same GPU in the same run (bench/gpu_matmul/torch_matmul.py under --python).
//
//   bench_gpu_matmul [--python PYTHON] [--size N] [--runs R] [--dtype bfloat16|float32]
//                    [--source-dir DIR]
//
// --python is an interpreter whose torch sees the GPU; --source-dir is where
// bench/gpu_matmul/torch_matmul.py is (default: the source tree this was built from). Without a
// GPU it says so and exits 0 without a RESULT line.
//
// Both sides: normal random inputs, 3 warm-up products, then runs of 20 products timed with CUDA
// events; TFLOP/s = 2 N^3 x 20 / time. The sides alternate, one run each per round, R rounds, so
// that both see the GPU at the same clocks and temperature. The RESULT line holds the medians.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "device/cuda/cuda_devices.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream_context.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom::bench {
namespace {

constexpr int kIterations = 20;

struct Options {
  std::string python = "python3";
  std::string source_dir = LOOM_SOURCE_DIR;
  int64_t size = 8192;
  int runs = 5;
  plan::DataType data_type = plan::BFLOAT16;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value = i + 1 < argc ? argv[i + 1] : "";
    bool ok = true;
    if (flag == "--python") {
      options.python = value;
    } else if (flag == "--source-dir") {
      options.source_dir = value;
    } else if (flag == "--size") {
      ok = absl::SimpleAtoi(value, &options.size) && options.size > 0;
    } else if (flag == "--runs") {
      ok = absl::SimpleAtoi(value, &options.runs) && options.runs > 0;
    } else if (flag == "--dtype") {
      ok = value == "bfloat16" || value == "float32";
      options.data_type = value == "float32" ? plan::FLOAT32 : plan::BFLOAT16;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: bench_gpu_matmul [--python PYTHON] [--size N>0] [--runs R>0] "
                   "[--dtype bfloat16|float32] [--source-dir DIR] (bad: %s %s)\n",
                   flag.c_str(), value.c_str());
      std::exit(2);
    }
    ++i;
  }
  return options;
}

// Normal random values in the element type, on the GPU.
void* RandomMatrix(int64_t n, plan::DataType type, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal;
  const int64_t count = n * n;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  if (type == plan::BFLOAT16) {
    bf16.resize(count);
    for (uint16_t& value : bf16) {
      float x = normal(engine);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      value = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    }
  } else {
    f32.resize(count);
    for (float& value : f32) value = normal(engine);
  }
  const size_t bytes = count * (type == plan::BFLOAT16 ? 2 : 4);
  void* device = nullptr;
  ExitIfError(cuda::CudaStatus(cudaMalloc(&device, bytes), "allocating a matrix"), "setup");
  ExitIfError(
      cuda::CudaStatus(cudaMemcpy(device,
                                  type == plan::BFLOAT16 ? static_cast<const void*>(bf16.data())
                                                         : static_cast<const void*>(f32.data()),
                                  bytes, cudaMemcpyHostToDevice),
                       "uploading a matrix"),
      "setup");
  return device;
}

// Loom's side: the kernel built once, one run per call.
class LoomMatmul {
 public:
  explicit LoomMatmul(const Options& options);
  ~LoomMatmul();
  double Run();

 private:
  const Options options_;
  KernelRegistry registry_;
  std::unique_ptr<cuda::CudaStreamContext> stream_;
  plan::KernelConf conf_;
  std::unique_ptr<Kernel> kernel_;
  void* a_ = nullptr;
  void* b_ = nullptr;
  void* c_ = nullptr;
  std::vector<TensorView> inputs_;
  std::vector<TensorView> outputs_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
};

LoomMatmul::LoomMatmul(const Options& options) : options_(options) {
  ExitIfError(RegisterCudaKernels(&registry_), "registering the CUDA kernels");
  absl::StatusOr<std::unique_ptr<cuda::CudaStreamContext>> stream =
      cuda::CudaStreamContext::Create(0);
  ExitIfError(stream.status(), "creating a stream");
  stream_ = std::move(*stream);
  const int64_t n = options.size;
  conf_.set_op_type("matmul");
  KernelInit init;
  init.task_name = "bench_matmul";
  init.conf = &conf_;
  init.stream = stream_.get();
  plan::TensorDesc desc;
  desc.add_shape(n);
  desc.add_shape(n);
  desc.set_data_type(options.data_type);
  init.inputs = {desc, desc};
  init.outputs = {desc};
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = registry_.Create(plan::CUDA, init);
  ExitIfError(kernel.status(), "building the matmul kernel");
  kernel_ = std::move(*kernel);
  a_ = RandomMatrix(n, options.data_type, 1);
  b_ = RandomMatrix(n, options.data_type, 2);
  c_ = RandomMatrix(n, options.data_type, 3);
  Shape shape{n, n};
  inputs_ = {{a_, options.data_type, shape}, {b_, options.data_type, shape}};
  outputs_ = {{c_, options.data_type, shape}};
  KernelContext context{inputs_, outputs_, 0};
  for (int i = 0; i < 3; ++i) ExitIfError(kernel_->Compute(context), "warm-up");
  ExitIfError(stream_->Synchronize(), "warm-up");
  cudaEventCreate(&start_);
  cudaEventCreate(&end_);
}

LoomMatmul::~LoomMatmul() {
  cudaEventDestroy(start_);
  cudaEventDestroy(end_);
  cudaFree(a_);
  cudaFree(b_);
  cudaFree(c_);
}

double LoomMatmul::Run() {
  KernelContext context{inputs_, outputs_, 0};
  cudaEventRecord(start_, stream_->stream());
  for (int i = 0; i < kIterations; ++i) ExitIfError(kernel_->Compute(context), "matmul");
  cudaEventRecord(end_, stream_->stream());
  ExitIfError(cuda::CudaStatus(cudaEventSynchronize(end_), "timing"), "timing");
  float milliseconds = 0;
  cudaEventElapsedTime(&milliseconds, start_, end_);
  const double n = static_cast<double>(options_.size);
  return 2.0 * n * n * n * kIterations / (milliseconds / 1e3) / 1e12;
}

// One run of the PyTorch peer in a process of its own (its GPU memory is gone when Loom runs).
double TorchRun(const Options& options) {
  std::string command = absl::StrCat(options.python, " ", options.source_dir,
                                     "/bench/gpu_matmul/torch_matmul.py --size ", options.size,
                                     " --runs 1 --iterations ", kIterations, " --dtype ",
                                     options.data_type == plan::BFLOAT16 ? "bfloat16" : "float32");
  absl::StatusOr<std::string> output = RunCommand(command);
  ExitIfError(output.status(), "running the PyTorch peer");
  for (absl::string_view line : absl::StrSplit(*output, '\n')) {
    double value;
    if (absl::ConsumePrefix(&line, "torch_tflops ") && absl::SimpleAtod(line, &value)) {
      return value;
    }
  }
  std::fprintf(stderr, "the PyTorch peer printed no timing:\n%s\n", output->c_str());
  std::exit(1);
}

int Main(int argc, char** argv) {
  Options options = ParseOptions(argc, argv);
  if (absl::StatusOr<int> count = cuda::DeviceCount(); !count.ok()) {
    std::printf("gpu-matmul: skipped: %s\n", std::string(count.status().message()).c_str());
    return 0;
  }
  absl::StatusOr<std::string> device = cuda::DeviceDescription(0);
  ExitIfError(device.status(), "finding a GPU");
  const char* type = options.data_type == plan::BFLOAT16 ? "bf16" : "f32";
  std::printf("gpu-matmul: %s %lld^3 on %s, %d rounds of %d products each\n", type,
              static_cast<long long>(options.size), device->c_str(), options.runs, kIterations);
  std::vector<double> loom;
  std::vector<double> torch;
  {
    LoomMatmul matmul(options);
    for (int round = 0; round < options.runs; ++round) {
      loom.push_back(matmul.Run());
      torch.push_back(TorchRun(options));
    }
  }
  std::printf("loom TFLOP/s:  %s\n", JoinValues(loom, 1).c_str());
  std::printf("torch TFLOP/s: %s\n", JoinValues(torch, 1).c_str());
  PrintResult("gpu-matmul", "tflops", Median(loom), "torch", Median(torch));
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::Main(argc, argv); }
