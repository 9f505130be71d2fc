# Every dependency is a Debian 12 package (scripts/install-deps) found through CMake.
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(glog CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(GTest REQUIRED)
find_package(OpenBLAS CONFIG REQUIRED)
# The transport is part of the sanitizer builds too (its threads are worth checking).
find_package(ucx CONFIG REQUIRED)

# OpenBLAS ships variables, not a target.
add_library(loom_openblas INTERFACE)
target_include_directories(loom_openblas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(loom_openblas INTERFACE ${OpenBLAS_LIBRARIES})

if(NOT LOOM_RUNTIME_ONLY)
  find_package(gRPC CONFIG REQUIRED)
  find_package(prometheus-cpp CONFIG REQUIRED)
  find_package(benchmark CONFIG REQUIRED)
  # Checking TLS certificates and keys at start, and the HTTPS of /metrics (rpc/tls.cc): the
  # OpenSSL gRPC and cpp-httplib link on Debian.
  find_package(OpenSSL REQUIRED)
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

# CUDA and NCCL are optional: built when the toolkit is found (CUDA 13 under /usr/local/cuda, with
# NCCL beside it), unless -DLOOM_CUDA=OFF. Sanitizer builds (LOOM_RUNTIME_ONLY) leave it out.
option(LOOM_CUDA "Build the CUDA backend when the toolkit is found" ON)
set(LOOM_CUDA_ARCHITECTURES "90" CACHE STRING "GPU architectures the CUDA kernels are built for")
set(LOOM_HAVE_CUDA OFF)
if(LOOM_CUDA AND NOT LOOM_RUNTIME_ONLY)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_library(LOOM_NCCL_LIBRARY nccl
               HINTS /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
  find_path(LOOM_NCCL_INCLUDE nccl.h
            HINTS /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include)
  if(CMAKE_CUDA_COMPILER AND LOOM_NCCL_LIBRARY AND LOOM_NCCL_INCLUDE)
    set(CMAKE_CUDA_ARCHITECTURES ${LOOM_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    # CMake 3.25 knows no flag for CUDA20 with nvcc 13 (targets ask for it through the C++20 of
    # what they link); nvcc itself takes -std=c++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    # Imported targets that name /usr/include would otherwise reach nvcc as -isystem=/usr/include,
    # which breaks libstdc++'s #include_next <math.h>.
    list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
    find_package(CUDAToolkit REQUIRED)
    # Executables that link CUDA objects are linked by the C++ driver, which does not know where
    # the CUDA runtime that nvcc's objects ask for lives.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    link_directories(${CUDAToolkit_LIBRARY_DIR})
    add_library(loom_nccl INTERFACE)
    target_include_directories(loom_nccl SYSTEM INTERFACE ${LOOM_NCCL_INCLUDE})
    target_link_libraries(loom_nccl INTERFACE ${LOOM_NCCL_LIBRARY})
    set(LOOM_HAVE_CUDA ON)
    message(STATUS "CUDA backend: ${CMAKE_CUDA_COMPILER} for sm_${LOOM_CUDA_ARCHITECTURES}; "
                   "NCCL ${LOOM_NCCL_LIBRARY}")
  else()
    message(STATUS "CUDA backend not built (nvcc: '${CMAKE_CUDA_COMPILER}', "
                   "NCCL: '${LOOM_NCCL_LIBRARY}')")
  endif()
endif()
