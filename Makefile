# pulumi-controller build.
#
#   make            release build: bin/pulumi-controller
#   make deps       install missing Debian packages (apt-get as root, else print the command)
#   make test       ASan+UBSan build, cmocka unit tests, then the pytest e2e suite
#   make deps-real  build the real kube-apiserver/etcd/pulumi/Flux into .real/ (make test runs it)
#   make unit       only the unit tests          make e2e   only the e2e tests
#   make fuzz       libFuzzer targets, FUZZ_SECONDS each (default 60)
#   make bench      the benchmarks in bench/
#   make demo       the end-to-end demo on an embedded default
#   make install    PREFIX (/usr/local) and DESTDIR honoured
#   make clean
#
# Sources are discovered by directory, so a new module is a new .c file and
# nothing else.  Unit tests are tests/unit/test_<name>.c, one binary each,
# linked against every object except main.

VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= gcc
PKGS      := libcurl libssl libcrypto libarchive libcjson yaml-0.1 libmicrohttpd
PYTHON    ?= /usr/bin/python3
FUZZ_SECONDS ?= 60
# Extra libFuzzer flags; CI passes a fixed -seed so its short run is reproducible.
FUZZ_FLAGS   ?=

MAIN_SRC  := src/cli/main.c
SRC_DIRS  := src src/base src/kube src/pulumi src/stack src/cli fluxsource oci
LIB_SRCS  := $(filter-out $(MAIN_SRC),$(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c)))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
TOOL_SRCS := $(wildcard tests/tools/*.c)

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN      := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter -Wno-format-truncation
BASEFLAGS := -std=c11 -D_GNU_SOURCE -Isrc -I. $(WARN) -DPC_VERSION='"$(VERSION)"' -pthread
REL_FLAGS := -O2 -g -D_FORTIFY_SOURCE=2 -fstack-protector-strong
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined

REL_DIR   := build/release
SAN_DIR   := build/asan
FUZZ_DIR  := build/fuzz

REL_OBJS  := $(patsubst %.c,$(REL_DIR)/%.o,$(LIB_SRCS))
SAN_OBJS  := $(patsubst %.c,$(SAN_DIR)/%.o,$(LIB_SRCS))
UNIT_BINS := $(patsubst tests/unit/%.c,$(SAN_DIR)/tests/%,$(UNIT_SRCS))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(FUZZ_DIR)/%,$(FUZZ_SRCS))
TOOL_BINS := $(patsubst tests/tools/%.c,$(SAN_DIR)/tools/%,$(TOOL_SRCS))

.PHONY: all deps deps-check test unit e2e fuzz fuzz-build bench demo install clean sanitize

all: bin/pulumi-controller

deps:
	@sh scripts/deps.sh

# The real kube-apiserver, kubectl, etcd and pulumi CLI (+ YAML language host and
# test provider) built into .real/ from their Go modules for the conformance
# tests; versions in tests/real/versions.env.  Idempotent; see docs/conformance.md.
.PHONY: deps-real
deps-real:
	@bash scripts/deps-real.sh

bin/pulumi-controller: $(REL_OBJS) $(REL_DIR)/$(MAIN_SRC:.c=.o)
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) -pthread -o $@ $^ $(PKG_LIBS)

$(REL_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(REL_FLAGS) $(PKG_CFLAGS) -MMD -MP -c -o $@ $<

# The sanitized build used by every test.
sanitize: $(SAN_DIR)/pulumi-controller $(UNIT_BINS) $(TOOL_BINS)

$(SAN_DIR)/pulumi-controller: $(SAN_OBJS) $(SAN_DIR)/$(MAIN_SRC:.c=.o)
	$(CC) $(SAN_FLAGS) -pthread -o $@ $^ $(PKG_LIBS)

$(SAN_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) -MMD -MP -c -o $@ $<

$(SAN_DIR)/tests/%: tests/unit/%.c $(SAN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) -o $@ $< $(SAN_OBJS) $(PKG_LIBS) -lcmocka $(UNIT_LDFLAGS)

# A unit test that must stop a thread at a call between two modules
# interposes on it with the linker (--wrap), in its own binary only, so the
# product carries no test hook: test_stack_shutdown holds a Secret handler
# in its Stack-index lookup until stack_ctl_unwatch joins its thread.
$(SAN_DIR)/tests/test_stack_shutdown: UNIT_LDFLAGS = -Wl,--wrap=kube_informer_by_index \
    -Wl,--wrap=kube_informer_stop

# Test-only programs (drivers for e2e tests): tests/tools/<name>.c.
$(SAN_DIR)/tools/%: tests/tools/%.c $(SAN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) -o $@ $< $(SAN_OBJS) $(PKG_LIBS)

export ASAN_OPTIONS := detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
export PC_BIN := $(CURDIR)/$(SAN_DIR)/pulumi-controller
export PC_TOOLS := $(CURDIR)/$(SAN_DIR)/tools

test: deps deps-real
	$(MAKE) unit
	$(MAKE) e2e

# check-layers: src/stack/'s layers (docs/architecture.md), from the objects
# just built: no include or call runs upward, and no cycle.
unit: sanitize
	@$(PYTHON) scripts/check-layers $(SAN_DIR)/src/stack
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

# --durations: the slowest tests in every log, to keep CI's time in view.
# E2E_JOBS pytest-xdist workers (0: in this process); --dist loadfile keeps
# each file's tests, and its module fixtures, in one worker.  Most of a
# scenario's time is spent waiting on its processes, so two workers use the
# two cores the CI machine has.
E2E_JOBS ?= 2
e2e: sanitize
	$(PYTHON) -m pytest -q -p no:cacheprovider -n $(E2E_JOBS) --dist loadfile --durations=15 tests/e2e

# libFuzzer needs clang.  The library is compiled once (instrumented, without
# libFuzzer's main) and every target links those objects.
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -Isrc -I. -g -O1 -DPC_VERSION='"fuzz"' -pthread
FUZZ_OBJS   := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(LIB_SRCS))
# Kept between runs (make would delete them as intermediates of a pattern).
.SECONDARY: $(FUZZ_OBJS)

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined $(PKG_CFLAGS) -MMD -MP -c -o $@ $<

$(FUZZ_DIR)/%: tests/fuzz/%.c $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined $(PKG_CFLAGS) -o $@ $^ $(PKG_LIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: deps $(FUZZ_BINS)
	@set -e; for f in $(FUZZ_BINS); do \
	    name=$$(basename $$f); corpus=build/fuzz-corpus/$$name; mkdir -p $$corpus; \
	    seeds=tests/fuzz/seeds/$$name; [ -d $$seeds ] || seeds=; \
	    echo "== $$name ($(FUZZ_SECONDS)s)"; \
	    $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -rss_limit_mb=2048 $(FUZZ_FLAGS) $$corpus $$seeds; \
	done

bench: deps all
	@set -e; for b in bench/*; do [ -x "$$b" ] && [ -f "$$b" ] || continue; echo "== $$b"; "$$b"; done

# The demo on an embedded default (docs/demo.md): the real kube-apiserver, etcd and pulumi
# when `make deps-real` has built them, the emulator and the stand-in otherwise.
# DEMO_FLAGS="--tier emulator" forces the fast tier; --keep keeps the sandbox's logs.
DEMO_FLAGS ?=
demo: deps all
	@$(PYTHON) scripts/demo.py $(DEMO_FLAGS)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 bin/pulumi-controller $(DESTDIR)$(PREFIX)/bin/pulumi-controller

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
