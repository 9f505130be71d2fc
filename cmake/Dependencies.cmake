# Every dependency is a Debian 12 package (scripts/install-deps) found through CMake.
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(glog CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(GTest REQUIRED)
find_package(OpenBLAS CONFIG REQUIRED)

# OpenBLAS ships variables, not a target.
add_library(loom_openblas INTERFACE)
target_include_directories(loom_openblas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(loom_openblas INTERFACE ${OpenBLAS_LIBRARIES})

if(NOT LOOM_RUNTIME_ONLY)
  find_package(gRPC CONFIG REQUIRED)
  find_package(ucx CONFIG REQUIRED)
  find_package(prometheus-cpp CONFIG REQUIRED)
  find_package(benchmark CONFIG REQUIRED)
  # libsystemd (sd_notify: loomd's readiness and watchdog under systemd) ships only a .pc file.
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
  # loomd's /metrics server (daemon/metrics_server.h says why not prometheus-cpp's Exposer).
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
  find_library(LOOM_CAF_CORE caf_core)
  if(LOOM_CAF_CORE)
    message(STATUS "CAF found (${LOOM_CAF_CORE}): the actor-hop benchmark compares against it")
  endif()
endif()

# CUDA and NCCL are optional: built when the toolkit is found.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(LOOM_HAVE_CUDA ON)
  find_library(LOOM_NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  find_path(LOOM_NCCL_INCLUDE nccl.h HINTS /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include)
  message(STATUS "CUDA toolkit found (${CMAKE_CUDA_COMPILER}); NCCL: ${LOOM_NCCL_LIBRARY}")
else()
  set(LOOM_HAVE_CUDA OFF)
  message(STATUS "CUDA toolkit not found: building the CPU backend only")
endif()
