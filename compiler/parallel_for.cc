#include "compiler/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace loom::compiler {

int DefaultCompileThreads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void ParallelFor(int count, int threads, absl::FunctionRef<void(int)> body) {
  threads = std::min(threads, count);
  if (threads <= 1) {
    for (int i = 0; i < count; ++i) body(i);
    return;
  }
  // Each thread takes the next index as it finishes one: the work per index may differ widely
  // (a node with a pipeline's first stage holds the embedding and the data source).
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i = next.fetch_add(1); i < count; i = next.fetch_add(1)) body(i);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace loom::compiler
