#include "kernels/cpu/sleep_kernel.h"

#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "sleep";
constexpr int64_t kNanosecondsPerSecond = 1'000'000'000;

// `time` plus `microseconds` (>= 0), saturating at the largest time.
timespec After(timespec time, int64_t microseconds) {
  constexpr int64_t kMaxSeconds = std::numeric_limits<time_t>::max() - 1;
  const int64_t seconds = microseconds / 1'000'000;
  if (seconds >= kMaxSeconds - time.tv_sec) {
    time.tv_sec = kMaxSeconds;
    time.tv_nsec = 0;
    return time;
  }
  const int64_t nanoseconds = time.tv_nsec + (microseconds % 1'000'000) * 1'000;
  time.tv_sec += seconds + nanoseconds / kNanosecondsPerSecond;
  time.tv_nsec = nanoseconds % kNanosecondsPerSecond;
  return time;
}

bool Before(const timespec& a, const timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

class SleepKernel : public Kernel {
 public:
  SleepKernel(int64_t microseconds, const std::atomic<bool>* ending)
      : microseconds_(microseconds), ending_(ending) {}

  absl::Status Compute(const KernelContext& context) override {
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (!context.inputs.empty() && !context.outputs.empty()) {
      const TensorView& input = context.inputs[0];
      const TensorView& output = context.outputs[0];
      const int64_t bytes = input.ByteSize();
      if (bytes > 0 && bytes == output.ByteSize() && input.data != output.data &&
          input.data != nullptr && output.data != nullptr) {
        std::memcpy(output.data, input.data, bytes);
      }
    }
    if (microseconds_ == 0) return absl::OkStatus();
    const timespec deadline = After(start, microseconds_);
    // Slices of absolute deadlines: the total stays exact, and `ending` is seen after each.
    timespec slice_end = start;
    while (Before(slice_end, deadline)) {
      if (ending_ != nullptr && ending_->load(std::memory_order_acquire)) {
        return absl::CancelledError(
            absl::StrCat(kOpType, ": interrupted, the job is ending"));
      }
      slice_end = After(slice_end, kSleepSliceMicroseconds);
      if (Before(deadline, slice_end)) slice_end = deadline;
      int result;
      do {
        result = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &slice_end, nullptr);
      } while (result == EINTR);
      if (result != 0) {
        return absl::InternalError(
            absl::StrCat(kOpType, ": clock_nanosleep failed: ", std::strerror(result)));
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t microseconds_;
  const std::atomic<bool>* ending_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSleepKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> microseconds = Attributes(*init.conf).GetInt("microseconds");
  if (!microseconds.ok()) return WithOpType(kOpType, microseconds.status());
  if (*microseconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'microseconds' must be >= 0, got ", *microseconds));
  }
  return std::make_unique<SleepKernel>(*microseconds, init.ending);
}

}  // namespace loom::cpu
