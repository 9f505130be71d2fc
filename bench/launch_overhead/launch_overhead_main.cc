// bench_launch_overhead: what a GPU compute actor costs per act, against launching the same
// kernels back to back from one host thread and against replaying them as a CUDA graph.
//
//   bench_launch_overhead [--chain N] [--pieces P] [--runs R]
//
// The job: a "fill" source on cuda:0 feeds a chain of N "scale" actors on the same stream (each
// a one-block kernel on 256 floats), whose last output is copied to the host and sunk there.
// Loom's figure is the job's wall time (JobRuntime::Run) over its P x (N + 1) GPU acts. The
// peers run the same N + 1 kernels (Loom's kernel objects, so the kernels are identical) P times:
// back to back from one thread, and as one captured CUDA graph replayed P times; each is timed
// from the first launch to the stream's end, over the same count. Microseconds per kernel; the
// RESULT ratio is Loom's against back-to-back launches. Without a GPU it says so and exits 0
// without a RESULT line.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "bench/common/bench_util.h"
#include "device/cuda/cuda_devices.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream_context.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_registry.h"
#include "node/cuda_backend.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"

namespace loom::bench {
namespace {

constexpr int64_t kElements = 256;

struct Options {
  int chain = 32;
  int pieces = 500;
  int runs = 5;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    std::string value = i + 1 < argc ? argv[i + 1] : "";
    bool ok = false;
    if (flag == "--chain") ok = absl::SimpleAtoi(value, &options.chain) && options.chain > 0;
    if (flag == "--pieces") ok = absl::SimpleAtoi(value, &options.pieces) && options.pieces > 0;
    if (flag == "--runs") ok = absl::SimpleAtoi(value, &options.runs) && options.runs > 0;
    if (!ok) {
      std::fprintf(stderr,
                   "usage: bench_launch_overhead [--chain N>0] [--pieces P>0] [--runs R>0] "
                   "(bad: %s %s)\n",
                   flag.c_str(), value.c_str());
      std::exit(2);
    }
  }
  return options;
}

void OnGpu(plan::Task& task, plan::StreamKind kind) {
  task.mutable_stream()->mutable_device()->set_type(plan::CUDA);
  task.mutable_stream()->mutable_device()->set_index(0);
  task.mutable_stream()->set_kind(kind);
}

plan::Plan ChainPlan(const Options& options) {
  PlanBuilder builder("launch_overhead");
  builder.AddCpuDevices(2);
  builder.mutable_plan().mutable_devices(1)->mutable_device()->set_type(plan::CUDA);
  builder.mutable_plan().mutable_devices(1)->mutable_device()->set_index(0);
  for (int i = 0; i <= options.chain; ++i) builder.AddRegister(absl::StrCat("x", i), {kElements});
  builder.AddRegister("host", {kElements});
  plan::Task& source = builder.AddTask("fill", plan::SOURCE, 0, {}, {"x0"}, "fill");
  source.set_num_pieces(options.pieces);
  PlanBuilder::SetFloatAttribute(source, "value", 1.0);
  OnGpu(source, plan::STREAM_COMPUTE);
  for (int i = 1; i <= options.chain; ++i) {
    plan::Task& scale =
        builder.AddTask(absl::StrCat("scale", i), plan::COMPUTE, 0, {absl::StrCat("x", i - 1)},
                        {absl::StrCat("x", i)}, "scale");
    PlanBuilder::SetFloatAttribute(scale, "scale", 1.0);
    OnGpu(scale, plan::STREAM_COMPUTE);
  }
  // The reading device copies (as the compiler places copies).
  builder.AddTask("to_host", plan::COPY, 0, {absl::StrCat("x", options.chain)}, {"host"})
      .mutable_stream()
      ->set_kind(plan::STREAM_COPY_IN);
  builder.AddTask("sink", plan::SINK, 0, {"host"}, {});
  return builder.plan();
}

double LoomMicroseconds(const plan::Plan& plan, const KernelRegistry& registry,
                        const Options& options) {
  JobOptions job_options;
  job_options.record_events = false;
  ExitIfError(cuda::UseCuda(&job_options), "setting up CUDA");
  absl::StatusOr<std::unique_ptr<JobRuntime>> job =
      JobRuntime::Create(plan, &registry, MakeActorFactory(), job_options);
  ExitIfError(job.status(), "building the job");
  auto start = std::chrono::steady_clock::now();
  ExitIfError((*job)->Run(), "running the job");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds * 1e6 / (static_cast<double>(options.pieces) * (options.chain + 1));
}

// The same kernels outside the runtime: a fill and `chain` scales on one stream.
class DirectChain {
 public:
  DirectChain(const KernelRegistry& registry, const Options& options) : options_(options) {
    absl::StatusOr<std::unique_ptr<cuda::CudaStreamContext>> stream =
        cuda::CudaStreamContext::Create(0);
    ExitIfError(stream.status(), "creating a stream");
    stream_ = std::move(*stream);
    fill_conf_.set_op_type("fill");
    (*fill_conf_.mutable_attributes())["value"].set_float_value(1.0);
    scale_conf_.set_op_type("scale");
    (*scale_conf_.mutable_attributes())["scale"].set_float_value(1.0);
    plan::TensorDesc desc;
    desc.add_shape(kElements);
    desc.set_data_type(plan::FLOAT32);
    KernelInit fill_init{"fill", &fill_conf_, {}, {desc}, stream_.get()};
    KernelInit scale_init{"scale", &scale_conf_, {desc}, {desc}, stream_.get()};
    absl::StatusOr<std::unique_ptr<Kernel>> fill = registry.Create(plan::CUDA, fill_init);
    absl::StatusOr<std::unique_ptr<Kernel>> scale = registry.Create(plan::CUDA, scale_init);
    ExitIfError(fill.status(), "building fill");
    ExitIfError(scale.status(), "building scale");
    fill_ = std::move(*fill);
    scale_ = std::move(*scale);
    ExitIfError(cuda::CudaStatus(cudaMalloc(&buffers_, 2 * kElements * sizeof(float)), "buffers"),
                "setup");
  }
  ~DirectChain() { cudaFree(buffers_); }

  // Launches one piece's kernels.
  void Piece() {
    auto* first = static_cast<float*>(buffers_);
    float* second = first + kElements;
    Shape shape{kElements};
    TensorView a{first, plan::FLOAT32, shape};
    TensorView b{second, plan::FLOAT32, shape};
    std::vector<TensorView> none;
    std::vector<TensorView> out_a = {a};
    ExitIfError(fill_->Compute(KernelContext{none, out_a, 0}), "fill");
    for (int i = 0; i < options_.chain; ++i) {
      std::vector<TensorView> in = {i % 2 == 0 ? a : b};
      std::vector<TensorView> out = {i % 2 == 0 ? b : a};
      ExitIfError(scale_->Compute(KernelContext{in, out, 0}), "scale");
    }
  }

  double LaunchMicroseconds() {
    Piece();
    ExitIfError(stream_->Synchronize(), "warm-up");
    auto start = std::chrono::steady_clock::now();
    for (int piece = 0; piece < options_.pieces; ++piece) Piece();
    ExitIfError(stream_->Synchronize(), "launches");
    return PerKernel(start);
  }

  double GraphMicroseconds() {
    cudaGraph_t graph = nullptr;
    ExitIfError(cuda::CudaStatus(
                    cudaStreamBeginCapture(stream_->stream(), cudaStreamCaptureModeThreadLocal),
                    "capturing"),
                "graph");
    Piece();
    ExitIfError(cuda::CudaStatus(cudaStreamEndCapture(stream_->stream(), &graph), "capturing"),
                "graph");
    cudaGraphExec_t exec = nullptr;
    ExitIfError(cuda::CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "instantiating"), "graph");
    cudaGraphLaunch(exec, stream_->stream());
    ExitIfError(stream_->Synchronize(), "warm-up");
    auto start = std::chrono::steady_clock::now();
    for (int piece = 0; piece < options_.pieces; ++piece) {
      ExitIfError(cuda::CudaStatus(cudaGraphLaunch(exec, stream_->stream()), "replaying"), "graph");
    }
    ExitIfError(stream_->Synchronize(), "replays");
    double result = PerKernel(start);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return result;
  }

 private:
  double PerKernel(std::chrono::steady_clock::time_point start) const {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return seconds * 1e6 / (static_cast<double>(options_.pieces) * (options_.chain + 1));
  }

  const Options options_;
  std::unique_ptr<cuda::CudaStreamContext> stream_;
  plan::KernelConf fill_conf_;
  plan::KernelConf scale_conf_;
  std::unique_ptr<Kernel> fill_;
  std::unique_ptr<Kernel> scale_;
  void* buffers_ = nullptr;
};

int Main(int argc, char** argv) {
  Options options = ParseOptions(argc, argv);
  if (absl::StatusOr<int> count = cuda::DeviceCount(); !count.ok()) {
    std::printf("launch-overhead: skipped: %s\n", std::string(count.status().message()).c_str());
    return 0;
  }
  absl::StatusOr<std::string> device = cuda::DeviceDescription(0);
  ExitIfError(device.status(), "finding a GPU");
  KernelRegistry registry;
  ExitIfError(RegisterCpuKernels(&registry), "registering the CPU kernels");
  ExitIfError(RegisterCudaKernels(&registry), "registering the CUDA kernels");
  std::printf("launch-overhead: a fill and %d scales of %lld floats, %d pieces, on %s\n",
              options.chain, static_cast<long long>(kElements), options.pieces, device->c_str());
  const plan::Plan plan = ChainPlan(options);
  DirectChain direct(registry, options);
  std::vector<double> loom;
  std::vector<double> launches;
  std::vector<double> graphs;
  for (int run = 0; run < options.runs; ++run) {
    loom.push_back(LoomMicroseconds(plan, registry, options));
    launches.push_back(direct.LaunchMicroseconds());
    graphs.push_back(direct.GraphMicroseconds());
  }
  std::printf("loom actor us/act:       %s\n", JoinValues(loom, 2).c_str());
  std::printf("back-to-back us/launch:  %s\n", JoinValues(launches, 2).c_str());
  std::printf("cuda graph us/kernel:    %s\n", JoinValues(graphs, 2).c_str());
  std::printf("median: loom %.2f us, launches %.2f us, graph %.2f us\n", Median(loom),
              Median(launches), Median(graphs));
  PrintResult("launch-overhead", "loom_us", Median(loom), "launch_us", Median(launches));
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::Main(argc, argv); }
