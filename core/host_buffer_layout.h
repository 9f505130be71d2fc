#ifndef LOOM_CORE_HOST_BUFFER_LAYOUT_H_
#define LOOM_CORE_HOST_BUFFER_LAYOUT_H_

// HostBufferLayout and LayOutHostBuffer: how a host buffer of a CPU device lies in memory
// (alignment, transparent huge pages) and what it costs the device's memory budget. The allocator
// (HostMemoryResource) and the compiler's memory estimate both use this one rule.

#include <cstdint>

namespace loom {

// How a host buffer (a CPU device's register slot, variable, accumulator) lies in memory, and so
// what it costs the device's budget. One rule, used by the allocator (HostMemoryResource) and by
// the compiler's memory estimate, so that a plan admitted at submit fits at launch.
//
// Buffers of half a huge page or more start on a huge page boundary and are backed by transparent
// huge pages where the kernel allows them: fewer TLB misses, page faults and page pins for the
// buffers that kernels stream through and that same-host transfers read with process_vm_readv
// (docs/PERFORMANCE.md, alltoall). Every whole huge page of the buffer is one; a tail of half a
// huge page or more is rounded up to a whole one (a huge page is the unit the kernel maps), a
// smaller tail keeps small pages. So a buffer takes at most half a huge page (1 MiB) more than
// its bytes, and at most twice them (a buffer of exactly 1 MiB takes 2 MiB). Smaller buffers are
// 64-byte aligned and count their bytes (the alignment's padding, like the allocator's own
// overhead, is not counted).
//
// Decision: round tails up from half a huge page only. A 1 MiB buffer on a huge page made 1 MiB
// all-to-alls take 0.7-0.85 of the time (docs/PERFORMANCE.md, alltoall); rounding smaller tails
// too would let one buffer waste up to a whole huge page, and a small tail is a small share of a
// large buffer's pages.
struct HostBufferLayout {
  static constexpr int64_t kHugePageBytes = int64_t{2} << 20;  // x86-64's transparent huge page
  static constexpr int64_t kSmallAlignment = 64;

  int64_t alignment = kSmallAlignment;
  // What the buffer takes from the host and from the device's budget: its bytes, or its huge
  // pages where they are more.
  int64_t footprint_bytes = 0;
  // The leading bytes asked for as transparent huge pages (a multiple of kHugePageBytes).
  int64_t huge_page_bytes = 0;
};

// The layout of a host buffer of `bytes` (>= 0) bytes.
HostBufferLayout LayOutHostBuffer(int64_t bytes);

}  // namespace loom

#endif  // LOOM_CORE_HOST_BUFFER_LAYOUT_H_
