# Loom's entry points. Every target that builds installs missing Debian packages first
# (scripts/install-deps is idempotent and fast when everything is present).
#
#   make demo                 the main job
#   make test                 the whole suite (ctest) but the tests labelled long
#   make test-long            the tests labelled long (minutes each; not run by CI)
#   make test-tsan            the runtime's and transport's tests under ThreadSanitizer
#   make test-asan            the same under AddressSanitizer + UBSan
#   make bench BENCH=<name>   one benchmark (make bench: all of them)
#   make build                binaries under build/bin/
#   make format               clang-format every source file

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
BENCH ?=
# Sanitizer builds compile only the runtime, actors, kernels, transport, the compiler and node
# libraries, and their tests (the compiler's extreme-shapes fuzz test among them; the
# forking transport tests too: ThreadSanitizer sees only one process's threads, so what they add
# there is the in-process side; AddressSanitizer checks the mailbox's reads of foreign records).
SANITIZER_TARGETS = loom_runtime_test loom_network_collectives_test loom_network_actors_test \
  loom_kernels_test loom_core_test loom_transport_test loom_transport_drive_test loom_network_collectives_transport_test \
  loom_transport_process_test loom_same_host_test loom_same_host_mailbox_test \
  loom_same_host_cpus_test loom_transport_network_test loom_compiler_extreme_shapes_test
SANITIZER_LABELS = 'core|runtime|kernels|transport|fuzz'
# UCX's memory hooks (libucm) crash a sanitized thread's exit, so the sanitizer runs turn them off
# (they keep the registration caches of RDMA and GPU transports right; the tests use TCP, CMA and
# self, which register nothing). Also for the build: the test discovery runs the binaries.
UCX_SANITIZER_ENV = UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no

.PHONY: deps configure build test test-long test-tsan test-asan demo bench format clean

deps:
	@scripts/install-deps

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 600 -LE long

# The tests labelled long (minutes each on two cores; CI runs their scaled-down versions).
test-long: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 3600 -L long

test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=thread -DLOOM_RUNTIME_ONLY=ON
	$(UCX_SANITIZER_ENV) cmake --build build-tsan -j $(JOBS) --target $(SANITIZER_TARGETS)
	cd build-tsan && $(UCX_SANITIZER_ENV) \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure --timeout 900 -L $(SANITIZER_LABELS)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=address -DLOOM_RUNTIME_ONLY=ON
	$(UCX_SANITIZER_ENV) cmake --build build-asan -j $(JOBS) --target $(SANITIZER_TARGETS)
	cd build-asan && $(UCX_SANITIZER_ENV) ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
	  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
	  ctest --output-on-failure --timeout 900 -L $(SANITIZER_LABELS)

# The demo's daemons read its training text beneath DEMO_DATA_ROOT and write its checkpoints
# beneath DEMO_CHECKPOINT_ROOT (loomd --data-root / --checkpoint-root), nowhere else.
DEMO_DATA_ROOT ?= /usr/share/common-licenses
DEMO_CHECKPOINT_ROOT ?= $(abspath $(BUILD_DIR))/demo

demo: build
	mkdir -p $(DEMO_CHECKPOINT_ROOT)
	scripts/demo $(BUILD_DIR) 200 --data-root $(DEMO_DATA_ROOT) \
	  --checkpoint-root $(DEMO_CHECKPOINT_ROOT)

bench: build
	scripts/bench $(BUILD_DIR) $(BENCH)

format:
	find core device kernels runtime transport actors testing compiler node rpc cli client daemon \
	  tools tests bench \
	  \( -name '*.h' -o -name '*.cc' \) -print0 | xargs -0 clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-tsan build-asan
