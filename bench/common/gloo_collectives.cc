#include "bench/common/gloo_collectives.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "core/cpu_affinity.h"

#ifdef LOOM_BENCH_HAVE_GLOO
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#endif

namespace loom::bench {

#ifndef LOOM_BENCH_HAVE_GLOO

bool HaveGloo() { return false; }

absl::StatusOr<std::vector<int64_t>> RunGlooCollective(GlooCollective collective, int ranks,
                                                       int64_t elements, int iterations,
                                                       const std::vector<int>& cpus) {
  return absl::FailedPreconditionError("built without Gloo (libgloo-dev was not found by CMake)");
}

#else

bool HaveGloo() { return true; }

namespace {

int64_t NowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One rank's whole life, bound to `cpu` (none: negative): "ENDS_NS t..." or "ERROR what" on
// `output`; never returns.
[[noreturn]] void RunRank(GlooCollective collective, int rank, int ranks, int64_t elements,
                          int iterations, int cpu, const std::string& store_path, int output) {
  alarm(120);
  std::string text;
  int code = 0;
  try {
    if (absl::Status bound = BindToCpu(cpu); !bound.ok()) {
      throw std::runtime_error(std::string(bound.message()));
    }
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_path);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
    context->connectFullMesh(store, device);
    std::vector<float> data(elements, 0.0f);
    std::vector<float> received(collective == GlooCollective::kAlltoall ? elements : 0, 0.0f);
    gloo::AllreduceOptions allreduce(context);
    allreduce.setOutput(data.data(), static_cast<size_t>(elements));
    allreduce.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::AlltoallOptions alltoall(context);
    if (collective == GlooCollective::kAlltoall) {
      alltoall.setInput(data.data(), static_cast<size_t>(elements));
      alltoall.setOutput(received.data(), static_cast<size_t>(elements));
    }
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    std::ostringstream ends;
    ends << "ENDS_NS";
    for (int iteration = 0; iteration < iterations; ++iteration) {
      if (collective == GlooCollective::kAlltoall) {
        gloo::alltoall(alltoall);
      } else {
        gloo::allreduce(allreduce);
      }
      ends << ' ' << NowNanoseconds();
    }
    text = ends.str();
  } catch (const std::exception& error) {
    text = absl::StrCat("ERROR ", error.what());
    code = 1;
  }
  text += '\n';
  const char* bytes = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t written = write(output, bytes, left);
    if (written <= 0) break;
    bytes += written;
    left -= static_cast<size_t>(written);
  }
  _exit(code);
}

std::string ReadAll(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, got);
  return text;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> RunGlooCollective(GlooCollective collective, int ranks,
                                                       int64_t elements, int iterations,
                                                       const std::vector<int>& cpus) {
  static int run = 0;
  const std::string store_path = absl::StrCat("/tmp/loom_bench_gloo_", getpid(), "_", run++);
  std::filesystem::remove_all(store_path);
  std::filesystem::create_directories(store_path);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  std::vector<int> outputs;
  for (int rank = 0; rank < ranks; ++rank) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return absl::InternalError("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      for (int earlier : outputs) close(earlier);
      close(pipe_fds[0]);
      RunRank(collective, rank, ranks, elements, iterations,
              rank < static_cast<int>(cpus.size()) ? cpus[rank] : -1, store_path, pipe_fds[1]);
    }
    close(pipe_fds[1]);
    pids.push_back(pid);
    outputs.push_back(pipe_fds[0]);
  }
  std::vector<std::string> texts;
  for (int output : outputs) {
    texts.push_back(ReadAll(output));
    close(output);
  }
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(store_path);
  for (int rank = 0; rank < ranks; ++rank) {
    if (texts[rank].rfind("ENDS_NS", 0) != 0) {
      return absl::InternalError(absl::StrCat(
          "Gloo rank ", rank, " failed: ", texts[rank].empty() ? "no output" : texts[rank]));
    }
  }
  std::istringstream words(texts[0].substr(7));
  std::vector<int64_t> ends;
  int64_t end = 0;
  while (words >> end) ends.push_back(end);
  return ends;
}

#endif  // LOOM_BENCH_HAVE_GLOO

}  // namespace loom::bench
