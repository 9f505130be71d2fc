#ifndef LOOM_CORE_FORMAT_BYTES_H_
#define LOOM_CORE_FORMAT_BYTES_H_

// Human-readable counts for messages and logs: FormatBytes ("512 B", "1.5 MiB") and FormatCount
// ("2 communicators"), which puts an "s" on the noun unless the count is 1. Memory budgets, the
// transports and loomctl's messages use them.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace loom {

// "512 B", "1.5 MiB".
std::string FormatBytes(int64_t bytes);

// "1 communicator", "2 communicators": `noun` takes an "s" unless `count` is 1.
std::string FormatCount(int64_t count, absl::string_view noun);

}  // namespace loom

#endif  // LOOM_CORE_FORMAT_BYTES_H_
