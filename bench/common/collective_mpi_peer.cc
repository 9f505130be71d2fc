// collective_mpi_peer OPERATION ELEMENTS WARMUP MEASURED: the OpenMPI side of bench_allreduce and
// bench_alltoall, started by them under mpirun. After a barrier every rank runs OPERATION on a
// float32 buffer of ELEMENTS zeros WARMUP + MEASURED times back to back: "allreduce"
// (MPI_Allreduce, sum, in place) or "alltoall" (MPI_Alltoall, ELEMENTS / ranks to each rank, out
// of place). Rank 0 prints one line
//   ENDS_NS t_0 t_1 ... t_(WARMUP+MEASURED-1)
// with the steady-clock time (nanoseconds) at which each call returned.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 5 ||
      (std::strcmp(argv[1], "allreduce") != 0 && std::strcmp(argv[1], "alltoall") != 0)) {
    std::fprintf(stderr,
                 "usage: collective_mpi_peer allreduce|alltoall ELEMENTS WARMUP MEASURED\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const bool alltoall = std::strcmp(argv[1], "alltoall") == 0;
  const int64_t elements = std::atoll(argv[2]);
  const int iterations = std::atoi(argv[3]) + std::atoi(argv[4]);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::vector<float> data(elements, 0.0f);
  std::vector<float> received(alltoall ? elements : 0, 0.0f);
  std::vector<int64_t> ends;
  ends.reserve(iterations);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int iteration = 0; iteration < iterations; ++iteration) {
    if (alltoall) {
      const int per_rank = static_cast<int>(elements / ranks);
      MPI_Alltoall(data.data(), per_rank, MPI_FLOAT, received.data(), per_rank, MPI_FLOAT,
                   MPI_COMM_WORLD);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(elements), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }
    ends.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count());
  }
  if (rank == 0) {
    std::printf("ENDS_NS");
    for (int64_t end : ends) std::printf(" %lld", static_cast<long long>(end));
    std::printf("\n");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
