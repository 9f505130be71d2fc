#ifndef LOOM_TOOLS_LOOMCTL_COMPILE_COMMAND_H_
#define LOOM_TOOLS_LOOMCTL_COMPILE_COMMAND_H_

// `loomctl compile`: CompileSubcommand, its flags and options (CompileOptions), CompileJob, which
// compiles a job file for the given devices (compiler/compile_for_devices.h) and writes, explains
// or summarises the plan, and FormatPlanSummary, the plan's one-paragraph summary.

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/arguments.h"
#include "cli/device_spec.h"
#include "compiler/compile_for_devices.h"
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
cli::Subcommand CompileSubcommand();

struct CompileOptions {
  // Empty only with list_ops.
  std::string job_path;
  // Every node's devices (--devices).
  cli::DeviceSpec devices;
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
cli::ArgumentSpec CompileArgumentSpec();
// INVALID_ARGUMENT naming the flag when a value is malformed or JOB / --devices is missing.
absl::StatusOr<CompileOptions> CompileOptionsFrom(const cli::ParsedArguments& arguments);

// The whole command on parsed options; returns the exit code.
int CompileJob(const CompileOptions& options, std::ostream& out, std::ostream& error);

// Compile options whose progress lines (the memory advice's alternatives) go to `error` as
// "<command>: <job_path>: <line>", flushed at once; `error` must outlive them.
compiler::CompileOptions ProgressTo(std::ostream& error, absl::string_view command,
                                    const std::string& job_path);

// One paragraph: ops, tasks by kind (compute, source, sink, copy, collective, and any other kind
// present), communicators, registers and their total memory (every slot counted), ending with a
// newline.
std::string FormatPlanSummary(const compiler::CompileResult& result,
                              const compiler::DeviceSet& devices);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_COMPILE_COMMAND_H_
