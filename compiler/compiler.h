#ifndef LOOM_COMPILER_COMPILER_H_
#define LOOM_COMPILER_COMPILER_H_

// The compiler's entry point: Compile runs the passes over a job (mixed-precision casts, autodiff
// and gradient clipping, validation and type inference, SBP inference, lowering, the split per
// node, the memory check) and returns a CompileResult holding the whole job's plan and one plan
// per node. Beside it: Explain and PlanToDot, the views of a result that `loomctl compile` prints
// (--explain) and writes (--dot), and ReadJobFile, which reads a job in any of its three formats.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/logical_graph.h"
#include "compiler/op_definition.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

struct CompileResult {
  // The job as the passes rewrote it (the graph points into it): with the mixed-precision casts
  // (Job.matmul_data_type), and the backward ops when it names a loss. Null when no pass
  // rewrote it.
  std::unique_ptr<job::Job> transformed_job;
  // Points into the compiled job (the caller's, or transformed_job): keep it alive while the
  // graph is used.
  LogicalGraph graph;
  // The whole job's plan, and its split per node.
  plan::Plan plan;
  std::vector<plan::Plan> node_plans;
};

struct CompileOptions {
  // The most tasks the whole plan may have; 0: no limit. Beyond it the compile stops with
  // RESOURCE_EXHAUSTED (naming the op that crossed it) before the plans take more memory: a
  // plan and its node plans take about 2 KiB per task while they are built.
  int64_t max_tasks = 0;
  // The threads the passes that work node by node (the split, the memory check) use at most; 0:
  // the machine's hardware threads (DefaultCompileThreads).
  int threads = 0;
  // Where there is one: called with a line on work that takes long (the memory advice compiling
  // a refused job's alternatives, one line each), for the caller to show.
  std::function<void(absl::string_view)> progress;
};

// Runs every pass of DESIGN.md §5 that exists: validation and type inference, autodiff (when the
// job names a loss; mixed-precision casts before it, recomputation within it), SBP inference,
// ZeRO's split of the variables (compiler/zero_sharding.h), boxing and lowering, the
// proof that the plan finishes (compiler/step_proof.h), the split per node, register memory
// sharing and the memory check (on the node plans).
absl::StatusOr<CompileResult> Compile(const job::Job& job, const OpRegistry& registry,
                                      const DeviceSet& devices, const CompileOptions& options = {});

// Compile's passes up to the lowered whole-job plan (with pieces per step), before the proof:
// `node_plans` stays empty. For tests that look at a plan as lowering wrote it.
absl::StatusOr<CompileResult> LowerJob(const job::Job& job, const OpRegistry& registry,
                                       const DeviceSet& devices,
                                       const CompileOptions& options = {});

// Per op: the chosen SBP signature, and every boxing inserted for its inputs with its collective
// and bytes; then the memory per device.
std::string Explain(const CompileResult& result);

// The plan's tasks and registers as a Graphviz graph, one cluster per device.
std::string PlanToDot(const plan::Plan& plan);

// Reads a job in binary (.pb), JSON (.json, the proto3 JSON mapping) or text format (any other
// name, e.g. .pbtxt); errors name the line.
absl::StatusOr<job::Job> ReadJobFile(const std::string& path);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_COMPILER_H_
