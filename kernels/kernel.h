#ifndef LOOM_KERNELS_KERNEL_H_
#define LOOM_KERNELS_KERNEL_H_

// The kernel interface: KernelInit (what a kernel is built from: its configuration, shapes and
// stream), KernelContext (one act's input and output slices and piece index) and Kernel, whose
// Compute runs on the task's stream thread. The compute and variable actors build their kernels
// through a KernelRegistry and run them.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/file_roots.h"
#include "core/tensor.h"
#include "device/stream_context.h"
#include "proto/plan.pb.h"

namespace loom {

// What a kernel is built from, once, before any actor starts: the op's configuration and the
// shapes it will see. A factory rejects what it cannot compute (wrong rank, bad attribute) here,
// so that a bad plan fails before it runs.
struct KernelInit {
  // The task's name, for error messages.
  std::string task_name;
  const plan::KernelConf* conf = nullptr;
  std::vector<plan::TensorDesc> inputs;
  std::vector<plan::TensorDesc> outputs;
  // The stream the kernel will run on (not owned; outlives the kernel). CPU kernels ignore it;
  // CUDA kernels enqueue their work on it (see device/cuda/cuda_stream_context.h).
  StreamContext* stream = nullptr;
  // Where the kernel may open the files its configuration names (data, checkpoints); not owned,
  // outlives the kernel. Null: it may open none (a kernel that needs one fails at creation).
  const FileRoots* files = nullptr;
  // Set once the job is ending (failed, aborted or cancelled); not owned, outlives the kernel. A
  // kernel that waits (a sleep, a slow read) looks at it often enough to return CANCELLED within
  // 100 ms. Null: never set.
  const std::atomic<bool>* ending = nullptr;
};

// One act of a kernel: the local slices of its inputs and outputs for one piece.
struct KernelContext {
  absl::Span<const TensorView> inputs;
  absl::Span<const TensorView> outputs;
  // The index of the piece being computed (sources derive their data from it).
  int64_t piece = 0;
};

// Computes one op on one device type for its local slice. Built once per task; Compute runs on the
// task's stream thread only, so a kernel may keep scratch state without locks.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual absl::Status Compute(const KernelContext& context) = 0;
};

}  // namespace loom

#endif  // LOOM_KERNELS_KERNEL_H_
