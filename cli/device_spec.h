#ifndef LOOM_CLI_DEVICE_SPEC_H_
#define LOOM_CLI_DEVICE_SPEC_H_

// DeviceSpec: the devices of one node as a --devices value names them ("cpu:4", "cuda:all",
// "cuda:0,1"), parsed by ParseDeviceSpec for loomd, `loomctl compile` and `loomctl run`, and
// spread over nodes as the compiler's DeviceSet (DeviceSpec::Spread).

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/logical_graph.h"
#include "proto/plan.pb.h"

namespace loom::cli {

// The devices of one node, as `--devices` names them (loomd, loomctl compile and run):
//   cpu:N          N CPU devices, cpu:0 .. cpu:N-1;
//   cuda:all       every GPU this machine has;
//   cuda:I[,J...]  the GPUs with those indices (CUDA's numbering), e.g. cuda:0,1.
struct DeviceSpec {
  plan::DeviceType type = plan::CPU;
  // Device indices, ascending and distinct.
  std::vector<int> indices;

  int size() const { return static_cast<int>(indices.size()); }
  // "cpu:4" / "cuda:0,1": the spec in the form ParseDeviceSpec reads back.
  std::string ToString() const;
  // The devices spread evenly over `nodes` nodes (node k gets devices k*N/K ... ), each node
  // keeping the indices in order: the compiler's view of a cluster of identical nodes.
  compiler::DeviceSet Spread(int nodes) const;
};

// How many GPUs there are (node/device_backends' CudaDeviceCount): only cuda:all asks.
using GpuCounter = std::function<absl::StatusOr<int>()>;

// Parses a --devices value. INVALID_ARGUMENT, prefixed with `command` ("loomctl compile") and
// naming the value, when it is malformed; cuda:all fails with the counter's error when this
// machine has no usable GPU.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& command, const std::string& text,
                                           const GpuCounter& gpu_count);

}  // namespace loom::cli

#endif  // LOOM_CLI_DEVICE_SPEC_H_
