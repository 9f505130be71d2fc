// compile-scale: a GPT-like forward graph of 96 layers (about 2,500 ops) lowered onto 64 devices
// ([4, 4] per stage x 4 stages: DP x TP x PP) and onto 1,024 devices ([16, 16] x 4). Each compile
// runs in its own child process so its peak memory is its own. Reports wall time, peak memory and
// the growth exponent of time between the two sizes. The passes that work node by node (the split,
// the memory check) use the machine's hardware threads, or `--threads N`; the rest is one thread.
// The goals (<= 1 s at 64 devices, <= 10 s at 1,024, exponent <= 1.1) are the reference: no peer
// compiler runs on these machines (OneFlow and Alpa report minutes to tens of minutes for
// comparable graphs).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/compile_scale/gpt_job.h"
#include "compiler/compiler.h"
#include "compiler/parallel_for.h"
#include "glog/logging.h"

namespace loom::bench {
namespace {

struct Measurement {
  double seconds = 0;
  double peak_megabytes = 0;
  int64_t tasks = 0;
  int ops = 0;
};

struct Layout {
  int data, tensor, pipeline, devices_per_node;
  int threads;  // CompileOptions::threads (0: the default, the hardware threads)
};

// Compiles in a child process; the child reports seconds and task count through a pipe, the
// parent reads the child's peak RSS from wait4.
Measurement MeasureOnce(const Layout& layout) {
  int pipe_ends[2];
  PCHECK(pipe(pipe_ends) == 0);
  pid_t child = fork();
  PCHECK(child >= 0);
  if (child == 0) {
    close(pipe_ends[0]);
    GptShape shape;
    job::Job job =
        MakeGptJob(shape, layout.data, layout.tensor, layout.pipeline, layout.devices_per_node);
    compiler::OpRegistry registry;
    CHECK(compiler::RegisterStandardOps(&registry).ok());
    int devices = layout.data * layout.tensor * layout.pipeline;
    compiler::CompileOptions options;
    options.threads = layout.threads;
    auto start = std::chrono::steady_clock::now();
    auto result = compiler::Compile(
        job, registry, compiler::DeviceSet::Cpus(devices, devices / layout.devices_per_node),
        options);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(result.ok()) << result.status();
    double report[3] = {seconds, static_cast<double>(result->plan.tasks_size()),
                        static_cast<double>(job.ops_size())};
    PCHECK(write(pipe_ends[1], report, sizeof(report)) == sizeof(report));
    _exit(0);
  }
  close(pipe_ends[1]);
  double report[3] = {0, 0, 0};
  PCHECK(read(pipe_ends[0], report, sizeof(report)) == sizeof(report));
  close(pipe_ends[0]);
  int status = 0;
  struct rusage usage;
  PCHECK(wait4(child, &status, 0, &usage) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the compile failed";
  return Measurement{report[0], usage.ru_maxrss / 1024.0, static_cast<int64_t>(report[1]),
                     static_cast<int>(report[2])};
}

Measurement Measure(const Layout& layout, int repetitions, const char* label) {
  std::vector<double> seconds;
  std::vector<double> megabytes;
  Measurement last;
  for (int i = 0; i < repetitions; ++i) {
    last = MeasureOnce(layout);
    seconds.push_back(last.seconds);
    megabytes.push_back(last.peak_megabytes);
    std::printf("  %s repetition %d: %.3f s, peak %.0f MiB, %lld tasks from %d ops\n", label, i + 1,
                last.seconds, last.peak_megabytes, static_cast<long long>(last.tasks), last.ops);
    std::fflush(stdout);
  }
  last.seconds = Median(seconds);
  last.peak_megabytes = Median(megabytes);
  return last;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  using namespace loom::bench;
  int threads = 0;
  if (argc == 3 && std::string(argv[1]) == "--threads") threads = std::atoi(argv[2]);
  if (!(argc == 1 || (argc == 3 && threads >= 1))) {
    std::fprintf(stderr, "usage: bench_compile_scale [--threads N (N >= 1; default: %d)]\n",
                 loom::compiler::DefaultCompileThreads());
    return 2;
  }
  const int repetitions = 3;
  std::printf(
      "compile-scale: GPT-like forward, 96 layers, DP x TP x PP; %d threads for the "
      "node-by-node passes\n",
      threads > 0 ? threads : loom::compiler::DefaultCompileThreads());
  Measurement small =
      Measure(Layout{4, 4, 4, 8, threads}, repetitions, "64 devices [4, 4] x 4 stages");
  Measurement large =
      Measure(Layout{16, 16, 4, 8, threads}, repetitions, "1024 devices [16, 16] x 4 stages");
  double exponent = std::log(large.seconds / small.seconds) / std::log(1024.0 / 64.0);
  std::printf("64 devices:   median %.3f s, peak %.0f MiB (goal <= 1 s)\n", small.seconds,
              small.peak_megabytes);
  std::printf("1024 devices: median %.3f s, peak %.0f MiB (goal <= 10 s)\n", large.seconds,
              large.peak_megabytes);
  std::printf("growth exponent of time from 64 to 1024 devices: %.2f (goal <= 1.1)\n", exponent);
  std::printf("RESULT compile-scale: seconds_1024_devices=%.3f goal_seconds=10 ratio=%.3f\n",
              large.seconds, large.seconds / 10.0);
  return 0;
}
