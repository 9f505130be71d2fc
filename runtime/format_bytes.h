#ifndef LOOM_RUNTIME_FORMAT_BYTES_H_
#define LOOM_RUNTIME_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

namespace loom {

// "512 B", "1.5 MiB".
std::string FormatBytes(int64_t bytes);

}  // namespace loom

#endif  // LOOM_RUNTIME_FORMAT_BYTES_H_
