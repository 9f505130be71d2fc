// allreduce_mpi_peer ELEMENTS WARMUP MEASURED: the OpenMPI side of bench_allreduce, started by it
// under mpirun. Every rank all-reduces (sum, in place) a float32 buffer of ELEMENTS zeros WARMUP +
// MEASURED times back to back after a barrier; rank 0 prints one line
//   ENDS_NS t_0 t_1 ... t_(WARMUP+MEASURED-1)
// with the steady-clock time (nanoseconds) at which each MPI_Allreduce returned.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: allreduce_mpi_peer ELEMENTS WARMUP MEASURED\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int64_t elements = std::atoll(argv[1]);
  const int iterations = std::atoi(argv[2]) + std::atoi(argv[3]);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<float> data(elements, 0.0f);
  std::vector<int64_t> ends;
  ends.reserve(iterations);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int iteration = 0; iteration < iterations; ++iteration) {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(elements), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
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
