#ifndef LOOM_COMPILER_MEMORY_PLAN_H_
#define LOOM_COMPILER_MEMORY_PLAN_H_

// Pass 9, the memory check: EstimateMemory gives what each device of a job's node plans will
// allocate (registers, optimizer and accumulator states, collective staging) as a
// DeviceMemoryEstimate, and CheckMemory fails with RESOURCE_EXHAUSTED when one exceeds its
// device's budget or kMaxDeviceMemoryBytes. Sums saturate rather than wrap. Compile
// (compiler/compiler.h) runs CheckMemory on the node plans; `loomctl compile` sums the estimates.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/checked_arithmetic.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// The most one device may be asked to hold, budget or none: 2^56 bytes (64 PiB, beyond any
// device by orders of magnitude). A larger estimate is a job of absurd shapes, refused before it
// runs; the bound also keeps every sum of an estimate far from int64's limit.
inline constexpr int64_t kMaxDeviceMemoryBytes = int64_t{1} << 56;

// A device's estimate by what its buffers hold (the breakdown of the Ultra-Scale Playbook), each
// part as the runtime lays it out. Registers in memory pools are counted by their pools; what
// the pools' registers would take apart is given by kind too.
struct MemoryParts {
  int64_t parameters = 0;        // the variables' values (registers VARIABLE tasks write)
  int64_t gradients = 0;         // registers a VARIABLE or ACCUMULATE reads, outside pools
  int64_t optimizer_states = 0;  // the variables' optimizer states
  int64_t accumulators = 0;      // the sums of gradients over a step's micro-batches
  int64_t activations = 0;       // the other registers of computations, outside pools
  // Registers collectives, sends or receives write or read (their peers' bytes), and the
  // staging buffers of network collectives.
  int64_t communication = 0;
  int64_t pools = 0;                 // the memory pools
  int64_t pooled_gradients = 0;      // what the pools' gradients would take apart
  int64_t pooled_communication = 0;  // what the pools' communication registers would take apart
  int64_t pooled_activations = 0;    // what the pools' other registers would take apart
  // What the registers it produces in host memory (RegisterDesc.host_memory: offloaded
  // activations) take there, as the host allocator lays them out: its node's host account, not
  // the device's, and not in DeviceMemoryEstimate::total_bytes.
  int64_t offloaded = 0;
};

// "parameters 129.2 MiB, gradients ..., ...": the non-zero parts of `parts`.
std::string DescribeMemoryParts(const MemoryParts& parts);

struct DeviceMemoryEstimate {
  plan::Device device;
  MemoryParts parts;
  // Every slot of every register the device's tasks produce (the node split's copies included),
  // registers that share memory (RegisterDesc.pool) counted by their pools.
  int64_t register_bytes = 0;
  // What the same registers would take each in buffers of its own (REGISTER_MEMORY_SEPARATE).
  int64_t unshared_register_bytes = 0;
  // Its variables' optimizer states and its accumulators' sums.
  int64_t state_bytes = 0;
  // The staging buffers its ranks of network collectives hold (core/collective_staging.h).
  int64_t staging_bytes = 0;
  int64_t budget_bytes = 0;

  // The sum, INT64_MAX when it does not fit (each part saturates likewise).
  int64_t total_bytes() const {
    const std::optional<int64_t> sum = CheckedAdd(register_bytes, state_bytes);
    if (!sum.has_value()) return std::numeric_limits<int64_t>::max();
    return CheckedAdd(*sum, staging_bytes).value_or(std::numeric_limits<int64_t>::max());
  }
};

// Pass 9, on the node plans of a job (SplitByNode; a one-node job's plan alone will do): what
// each device will allocate, as the runtime allocates it. Registers live on their producer's
// device, every slot counted; a variable holds its optimizer states (one slot of its value each)
// and an accumulator its sum (one slot of its input); a CPU device's buffers count as the host
// allocator lays them out on huge pages (core/host_buffer_layout.h). The staging of network
// collectives is what CollectiveStagingBytes gives for the register shapes, one buffer per slot of
// each (communicator, rank) sized for the largest of its collectives. Registers in a memory pool
// count as their pool's bytes. Not counted: the host
// copies of fetched tensors a sink keeps (charged as they arrive). In the order of the plans'
// devices.
// The plans are read on up to `threads` threads.
std::vector<DeviceMemoryEstimate> EstimateMemory(absl::Span<const plan::Plan> node_plans,
                                                 int threads = 1);

// Fails with RESOURCE_EXHAUSTED naming the device and what takes the most of it (its largest
// registers, and its staging with the communicator that holds the most) when a device's estimate
// exceeds its budget, or kMaxDeviceMemoryBytes whatever its budget; and naming the node when the
// host memory its devices' offloaded activations take exceeds Plan.host_memory_budget_bytes
// (or kMaxDeviceMemoryBytes).
absl::Status CheckMemory(absl::Span<const plan::Plan> node_plans, int threads = 1);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_MEMORY_PLAN_H_
