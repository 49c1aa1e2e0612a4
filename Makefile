# SPDX-License-Identifier: MIT
#
# The two commands of the README:
#   make demo    build muster and show the system working on this machine
#   make check   build, then run every test: unit (ctest), interop (pytest),
#                the same under ASan+UBSan, the unit tests under TSan, a short
#                fuzz of every decoder, the source style check, `make demo`
#                in a fresh Debian 12 root, and the Debian packages built,
#                linted and installed in another
#   make check-full   make check with the slow variants turned on
#                (MUSTER_CHECK_FULL=1: bigger batches and sequences in the
#                torch model tests, ...)
# Both install the Debian packages they need first (scripts/deps.sh): `make
# demo`, `make` and `make build` only the build dependencies, the check
# targets the test dependencies as well.

BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON ?= /usr/bin/python3
FUZZ_SECONDS ?= 10
PYTEST = $(PYTHON) -m pytest -q -p no:cacheprovider tests/interop

.PHONY: all build demo check check-full check-unit check-interop check-sanitize \
        check-fuzz check-style check-tsan check-fresh fuzz bench install clean \
        deps-build deps-test check-packaging deps-packaging

all: build

deps-build:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

deps-packaging:
	@scripts/deps.sh packaging

build: deps-build
	cmake -S . -B $(BUILD) -DMU_WERROR=ON >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/bin/muster demo

check: deps-test deps-packaging check-style
	$(MAKE) --no-print-directory check-unit check-interop check-sanitize check-tsan \
	        check-fuzz check-fresh check-packaging

# The slow variants: every test file reads MUSTER_CHECK_FULL=1 and runs its
# bigger cases (tests/interop/test_torch_models.py: batches of 4 images,
# 32-token sequences).
check-full:
	MUSTER_CHECK_FULL=1 $(MAKE) --no-print-directory check

# The Debian packages (debian/): build them from a clean copy of the tree,
# lintian (no errors), install them in a throwaway Debian 12 root and run
# muster version, muster tracker --help and python3 -c "import muster"
# there. Needs root; the last step of `make check`.
check-packaging: deps-packaging
	scripts/check-packaging.sh

check-style:
	@scripts/checksrc.sh

check-unit: deps-test build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

check-interop: deps-test build
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin/muster $(PYTEST)

# Unit and interop tests again, against an ASan+UBSan build: a memory error
# or a leak in any server path fails the run.
check-sanitize: deps-test
	cmake -S . -B $(ASAN_BUILD) -DMU_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
	      -DMU_SANITIZE="address;undefined" >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 MUSTER_BIN=$(CURDIR)/$(ASAN_BUILD)/bin/muster $(PYTEST)

# The unit tests under ThreadSanitizer: every server runs its loop on a
# thread of its own, and server/server's two-servers test runs two device
# servers in one process. Any report fails the run (TSan exits 66).
check-tsan: deps-test
	cmake -S . -B $(TSAN_BUILD) -DMU_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
	      -DMU_SANITIZE=thread -DMU_BUILD_BENCH=OFF >/dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	TSAN_OPTIONS=second_deadlock_stack=1 \
	    ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS)

# The README's first command on a fresh machine: `make demo` in a throwaway
# Debian 12 root (debootstrap) that has only what the README says a user
# brings. Needs root or sudo; keeps downloaded .debs in /var/cache/muster-fresh.
check-fresh: deps-test
	scripts/fresh-check.sh

# Build every libFuzzer driver with clang and run each briefly over its seed
# corpus; `make fuzz FUZZ_SECONDS=600` for a real session.
fuzz check-fuzz: deps-test
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DMU_BUILD_FUZZ=ON -DMU_BUILD_TESTS=OFF \
	      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	@for f in $(FUZZ_BUILD)/bin/fuzz_*; do \
	    name=$$(basename $$f); corpus=fuzz/corpus/$${name#fuzz_}; \
	    echo "fuzz: $$name for $(FUZZ_SECONDS)s over $$corpus"; \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$name; \
	    $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 \
	        $(FUZZ_BUILD)/corpus/$$name $$corpus 2>$(FUZZ_BUILD)/$$name.log \
	        || { tail -50 $(FUZZ_BUILD)/$$name.log; exit 1; }; \
	done

bench: build
	bench/tracker.sh
	bench/store.sh
	bench/md.sh
	bench/pipeline.sh
	bench/kern.sh
	bench/cluster.sh
	bench/llm.sh
	bench/hostile.sh

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
