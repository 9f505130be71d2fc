#include "tests/cluster/multi_node_run.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/file_roots.h"
#include "daemon/job_admission.h"
#include "daemon/node_job.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"

namespace loom::testing {

absl::StatusOr<std::vector<plan::Plan>> CompileForNodes(const job::Job& job, int nodes,
                                                        int devices_per_node,
                                                        plan::Plan* whole_plan) {
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled =
      daemon::AdmitJob(job, compiler::DeviceSet::Cpus(nodes * devices_per_node, nodes));
  if (!compiled.ok()) return compiled.status();
  *whole_plan = (*compiled)->result.plan;
  return (*compiled)->result.node_plans;
}

absl::StatusOr<Fetched> RunNodePlans(const std::vector<plan::Plan>& node_plans,
                                     const plan::Plan& whole_plan,
                                     const NodeRunOptions& run_options) {
  KernelRegistry cpu_kernels;
  const KernelRegistry* kernels = run_options.kernels;
  if (kernels == nullptr) {
    if (absl::Status status = RegisterCpuKernels(&cpu_kernels); !status.ok()) return status;
    kernels = &cpu_kernels;
  }
  // The node plans may read token files and initial states anywhere (declared before the jobs,
  // which use it, so it outlives them).
  const FileRoots files = FileRoots::Unrestricted();
  std::vector<std::unique_ptr<daemon::NodeJob>> jobs;
  std::map<int, std::string> addresses;
  for (const plan::Plan& node_plan : node_plans) {
    JobOptions options;
    options.files = &files;
    options.stall_timeout = absl::Seconds(30);
    options.collective_timeout = absl::Seconds(30);
    if (run_options.set_up) {
      if (absl::Status status = run_options.set_up(node_plan, &options); !status.ok()) {
        return status;
      }
    }
    absl::StatusOr<std::unique_ptr<daemon::NodeJob>> job =
        daemon::NodeJob::Create(node_plan, kernels, options);
    if (!job.ok()) return job.status();
    addresses[node_plan.node()] = (*job)->address();
    jobs.push_back(*std::move(job));
  }
  for (auto& job : jobs) {
    if (absl::Status status = job->Connect(addresses); !status.ok()) return status;
  }
  // As loomd's nodes do before they start (every probe was sent by the connects above).
  for (auto& job : jobs) {
    if (absl::Status status = job->WaitForPeers(absl::Seconds(10)); !status.ok()) return status;
  }
  for (auto& job : jobs) {
    if (absl::Status status = job->Start(); !status.ok()) return status;
  }
  std::vector<absl::Status> statuses(jobs.size());
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < jobs.size(); ++i) {
    waiters.emplace_back([&, i] { statuses[i] = jobs[i]->Wait(); });
  }
  for (std::thread& waiter : waiters) waiter.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!statuses[i].ok()) {
      return absl::Status(statuses[i].code(),
                          absl::StrCat("node ", i, ": ", statuses[i].message()));
    }
  }
  if (run_options.inspect) {
    for (auto& job : jobs) run_options.inspect(job->runtime());
  }

  return AssembleFetches(
      whole_plan, [&](const std::string& sink) -> absl::StatusOr<const std::vector<HostTensor>*> {
        for (auto& job : jobs) {
          if (job->runtime().FindActor(sink) != nullptr) return KeptPieces(job->runtime(), sink);
        }
        return absl::NotFoundError(absl::StrCat("no node ran sink ", sink));
      });
}

absl::StatusOr<Fetched> RunOnOneNode(const job::Job& job, int devices) {
  plan::Plan whole_plan;
  absl::StatusOr<std::vector<plan::Plan>> plans = CompileForNodes(job, 1, devices, &whole_plan);
  if (!plans.ok()) return plans.status();
  KernelRegistry kernels;
  if (absl::Status status = RegisterCpuKernels(&kernels); !status.ok()) return status;
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(whole_plan, kernels, JobOptions{});
  if (!run.ok()) return run.status();
  return std::move(run->fetched);
}

}  // namespace loom::testing
