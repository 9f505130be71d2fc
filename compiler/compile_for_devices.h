#ifndef LOOM_COMPILER_COMPILE_FOR_DEVICES_H_
#define LOOM_COMPILER_COMPILE_FOR_DEVICES_H_

// Compiling a job file for a set of devices with the standard ops: what `loomctl compile` and
// `loomctl run` do locally and what loomd's coordinator does for a submitted job. A job whose
// one-dimensional default placement does not fit the devices is re-placed on them
// (FitJobToDevices), so the same job compiles for cpu:1, cpu:4 or cpu:4 over two nodes.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "compiler/logical_graph.h"
#include "compiler/op_definition.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// A compiled job: the result, and the job and op registry its graph points into.
struct CompiledJob {
  job::Job job;
  OpRegistry registry;
  CompileResult result;
};

// "4 CPUs on 2 nodes", "2 GPUs on 1 node".
std::string DescribeDevices(const DeviceSet& devices);

// Fits a job to the devices it is compiled for. A job whose default placement names a device
// outside `devices` is re-placed on all of `devices` when that placement is one-dimensional and
// nothing else in the job names devices (no stage placements, no variable, input or op with a
// placement of its own). Any other job is left as written (the compiler then names what does not
// fit). Returns a note saying what changed, or "" when nothing did.
std::string FitJobToDevices(const DeviceSet& devices, job::Job* job);

// Reads the job file, fits it to `devices` (FitJobToDevices; the note, if any, goes to `note`),
// overrides its num_steps with `steps` when positive, and compiles it with the standard ops.
// Errors are the reader's or the compiler's, unchanged.
absl::StatusOr<std::unique_ptr<CompiledJob>> ReadAndCompileJob(const std::string& path,
                                                               const DeviceSet& devices,
                                                               int64_t steps, std::string* note);

// ReadAndCompileJob in two halves, for callers that change the job before compiling it: the job
// read, fitted and with its steps overridden; and the compilation of a job with the standard ops.
absl::StatusOr<job::Job> ReadJobForDevices(const std::string& path, const DeviceSet& devices,
                                           int64_t steps, std::string* note);
absl::StatusOr<std::unique_ptr<CompiledJob>> CompileJobWithStandardOps(
    job::Job job, const DeviceSet& devices, const CompileOptions& options = {});

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_COMPILE_FOR_DEVICES_H_
