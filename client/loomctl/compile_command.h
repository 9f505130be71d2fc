#ifndef LOOM_CLIENT_LOOMCTL_COMPILE_COMMAND_H_
#define LOOM_CLIENT_LOOMCTL_COMPILE_COMMAND_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/loomctl/arguments.h"
#include "client/loomctl/device_spec.h"
#include "compiler/compiler.h"
#include "compiler/logical_graph.h"
#include "compiler/op_definition.h"
#include "proto/job.pb.h"

namespace loom::loomctl {

// `loomctl compile JOB --devices cpu:N|cuda:... [flags]`: compiles a job file into a physical plan,
// then writes the plan (whole, per node, as Graphviz), explains it, or summarises it. `loomctl
// compile --list-ops` lists the op types the compiler knows.
//
// Exit codes: 0 compiled; 1 an output file could not be written; 2 on a usage error, a job file
// that cannot be read, or a job the compiler rejects (INVALID_ARGUMENT naming the op, or
// RESOURCE_EXHAUSTED for a device over its memory budget; the message goes to stderr).
Subcommand CompileSubcommand();

struct CompileOptions {
  // Empty only with list_ops.
  std::string job_path;
  // Every node's devices (--devices).
  DeviceSpec devices;
  int nodes = 1;
  // Empty: not written.
  std::string plan_path;
  std::string node_plan_directory;
  std::string dot_path;
  bool explain = false;
  bool list_ops = false;
  bool verbose = false;
};

// The flags of compile.
ArgumentSpec CompileArgumentSpec();
// INVALID_ARGUMENT naming the flag when a value is malformed or JOB / --devices is missing.
absl::StatusOr<CompileOptions> CompileOptionsFrom(const ParsedArguments& arguments);

// The whole command on parsed options; returns the exit code.
int CompileJob(const CompileOptions& options, std::ostream& out, std::ostream& error);

// Fits a job to the devices it is compiled for. A job whose default placement names a device
// outside `devices` is re-placed on all of `devices` when that placement is one-dimensional and
// nothing else in the job names devices (no stage placements, no variable, input or op with a
// placement of its own): so the same job compiles for --devices cpu:1, cpu:4 or cpu:4 over two
// nodes. Any other job is left as written (the compiler then names what does not fit). Returns a
// note saying what changed, or "" when nothing did.
std::string FitJobToDevices(const compiler::DeviceSet& devices, job::Job* job);

// A compiled job: the result, and the job and op registry its graph points into.
struct CompiledJob {
  job::Job job;
  compiler::OpRegistry registry;
  compiler::CompileResult result;
};

// Reads the job file, fits it to `devices` (FitJobToDevices; the note, if any, goes to `note`),
// overrides its num_steps with `steps` when positive, and compiles it with the standard ops.
// Errors are the reader's or the compiler's, unchanged.
absl::StatusOr<std::unique_ptr<CompiledJob>> ReadAndCompileJob(const std::string& path,
                                                               const compiler::DeviceSet& devices,
                                                               int64_t steps, std::string* note);

// ReadAndCompileJob in two halves, for callers that change the job before compiling it: the job
// read, fitted and with its steps overridden; and the compilation of a job with the standard ops.
absl::StatusOr<job::Job> ReadJobForDevices(const std::string& path,
                                           const compiler::DeviceSet& devices, int64_t steps,
                                           std::string* note);
absl::StatusOr<std::unique_ptr<CompiledJob>> CompileJobWithStandardOps(
    job::Job job, const compiler::DeviceSet& devices, const compiler::CompileOptions& options = {});

// One paragraph: ops, tasks by kind (compute, source, sink, copy, collective, and any other kind
// present), communicators, registers and their total memory (every slot counted), ending with a
// newline.
std::string FormatPlanSummary(const compiler::CompileResult& result,
                              const compiler::DeviceSet& devices);

}  // namespace loom::loomctl

#endif  // LOOM_CLIENT_LOOMCTL_COMPILE_COMMAND_H_
