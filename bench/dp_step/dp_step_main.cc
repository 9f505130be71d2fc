// bench_dp_step: a data-parallel training step of the tiny GPT on two processes of this machine:
// Loom (DP = 2 over two loomd processes) against PyTorch DistributedDataParallel (gloo backend, two
// processes), in one run.
//
// Loom: a local cluster of two loomd processes (coordinator + worker, one CPU device each, OpenBLAS
// at one thread: loomd's default --blas-threads 1); the job is tools/loom-gpt's tiny GPT (V=256,
// T=64, D=128, 4 layers, 4 heads, F=512, global batch 16, AdamW) with data_parallel = 2 and
// devices_per_node = 1, i.e. node0/cpu:0 and node1/cpu:0, submitted through the ClusterClient
// for kWarmup + kMeasured steps. A step's time is the StepEvent's step_time_seconds: the
// interval between the ends of successive steps as the coordinator sees them (every rank's loss
// arrived). The gradients are all-reduced across the two processes by NetworkCollectives (UCX).
// PyTorch: bench/dp_step/ddp_step.py (same model, same global batch split in two, same token
// file, same steps, one thread per process): the interval between the ends of successive steps on
// rank 0.
// Per run: the median over the kMeasured steps; kRepetitions runs of each, interleaved; the
// medians of the runs are compared.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "bench/common/local_cluster.h"
#include "tools/loom-gpt/gpt_model.h"

#ifndef LOOMD_BINARY
#define LOOMD_BINARY ""
#endif
#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR "."
#endif

namespace loom::bench {
namespace {

constexpr int kWarmup = 3;
constexpr int kMeasured = 20;
constexpr int kRepetitions = 5;
constexpr double kGoalRatio = 1.0;
constexpr const char* kPython = "/usr/bin/python3";

gpt::GptConfig TinyGptDataParallel() {
  gpt::GptConfig config;  // the tiny model's defaults
  config.steps = kWarmup + kMeasured;
  config.data_parallel = 2;
  config.devices_per_node = 1;
  return config;
}

absl::StatusOr<double> RunLoom(ClusterClient& client, const job::Job& job) {
  absl::StatusOr<v1::JobInfo> submitted = client.SubmitJob(job);
  if (!submitted.ok()) return submitted.status();
  std::vector<double> step_milliseconds;
  std::string failure;
  absl::Status watched = client.WatchJob(submitted->job_id(), [&](const v1::JobEvent& event) {
    if (event.has_step() && event.step().step() > kWarmup) {
      step_milliseconds.push_back(event.step().step_time_seconds() * 1e3);
    }
    if (event.has_state_change() && event.state_change().state() == v1::JOB_STATE_FAILED) {
      failure = event.state_change().error().message();
    }
  });
  if (!watched.ok()) return watched;
  if (!failure.empty()) return absl::InternalError(absl::StrCat("the job failed: ", failure));
  if (static_cast<int>(step_milliseconds.size()) != kMeasured) {
    return absl::InternalError(absl::StrCat(step_milliseconds.size(),
                                            " measured step events, "
                                            "expected ",
                                            kMeasured));
  }
  return Median(step_milliseconds);
}

// The number after "key": in flat JSON.
absl::StatusOr<double> JsonNumber(const std::string& json, const std::string& key) {
  const std::string pattern = absl::StrCat("\"", key, "\":");
  const size_t position = json.find(pattern);
  if (position == std::string::npos) {
    return absl::InternalError(absl::StrCat("no '", key, "' in ", json));
  }
  return std::strtod(json.c_str() + position + pattern.size(), nullptr);
}

struct TorchRun {
  double median_ms = 0;
  double gemm_gflops = 0;
};

absl::StatusOr<TorchRun> RunPyTorch(const std::string& script) {
  const std::string output = "/tmp/loom_bench_dp_step_ddp.json";
  std::remove(output.c_str());  // a result is never an earlier run's
  absl::StatusOr<std::string> ran =
      RunCommand(absl::StrCat("timeout 300 ", kPython, " ", script, " --world-size 2 --warmup ",
                              kWarmup, " --steps ", kMeasured, " --threads 1 --output ", output));
  if (!ran.ok()) return ran.status();
  std::ifstream file(output);
  std::stringstream text;
  text << file.rdbuf();
  TorchRun run;
  absl::StatusOr<double> median = JsonNumber(text.str(), "median_step_ms");
  if (!median.ok()) return median.status();
  absl::StatusOr<double> gemm = JsonNumber(text.str(), "gemm_1024_gflops");
  if (!gemm.ok()) return gemm.status();
  return TorchRun{*median, *gemm};
}

int Main(int argc, char** argv) {
  const std::string loomd = LOOMD_BINARY;
  const std::string script =
      argc > 1 ? argv[1] : absl::StrCat(LOOM_SOURCE_DIR, "/bench/dp_step/ddp_step.py");
  if (!ProgramExists(loomd)) {
    std::fprintf(stderr, "dp-step: loomd is not built ('%s')\n", loomd.c_str());
    return 2;
  }
  if (!ProgramExists(kPython) ||
      !RunCommand(absl::StrCat(kPython,
                               " -c 'import torch, torch.distributed as d; "
                               "assert d.is_gloo_available()'"))
           .ok()) {
    std::fprintf(stderr,
                 "dp-step: the peer PyTorch with gloo is not importable by %s (Debian package "
                 "python3-torch; scripts/install-deps installs it)\n",
                 kPython);
    return 2;
  }
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(TinyGptDataParallel());
  ExitIfError(job.status(), "building the GPT job");
  std::printf(
      "dp-step: tiny GPT (V=256 T=64 D=128 L=4 H=4 F=512, global batch 16, AdamW), DP=2 "
      "on two processes, one thread each; Loom (two loomd) vs PyTorch DDP (gloo); %d "
      "warm-up + %d measured steps per run, %d runs; ms per step (median step of each "
      "run)\n",
      kWarmup, kMeasured, kRepetitions);
  std::printf("machine at start: %s\n", MachineCheck().c_str());
  absl::StatusOr<LocalCluster> cluster = StartLocalCluster(loomd, "dp_step", 2, 1);
  ExitIfError(cluster.status(), "starting the local cluster");
  // std::exit skips the destructors: the daemons are stopped before a failure exits.
  auto exit_if_error = [&cluster](const absl::Status& status, const std::string& what) {
    if (!status.ok()) cluster->daemons.clear();
    ExitIfError(status, what);
  };
  std::vector<double> loom, torch, gemm;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    absl::StatusOr<double> ours = RunLoom(*cluster->client, *job);
    exit_if_error(ours.status(), "Loom's job");
    loom.push_back(*ours);
    absl::StatusOr<TorchRun> peer = RunPyTorch(script);
    exit_if_error(peer.status(), "PyTorch DDP");
    torch.push_back(peer->median_ms);
    gemm.push_back(peer->gemm_gflops);
  }
  std::printf("  loom          %s\n", JoinValues(loom, 2).c_str());
  std::printf("  pytorch ddp   %s\n", JoinValues(torch, 2).c_str());
  std::printf("  (PyTorch's GEMM 1024^3 on rank 0 after its steps, GFLOP/s: %s)\n",
              JoinValues(gemm, 1).c_str());
  std::printf("median: loom %.2f  pytorch ddp %.2f  ratio %.3f\n", Median(loom), Median(torch),
              Median(loom) / Median(torch));
  std::printf("machine at end: %s\n", MachineCheck().c_str());
  std::printf("GOAL dp-step: ratio <= %.1f (lower is better)\n", kGoalRatio);
  PrintResult("dp-step", "loom_ms", Median(loom), "pytorch_ddp_ms", Median(torch));
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::Main(argc, argv); }
