# topicmatch: `make demo` and `make test` work on a fresh machine (Debian, Rust, Python 3.11).
# Both create .venv here and install the package into it with maturin (release profile).


SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
# maturin gets a target dir of its own: alternating it with `cargo test` in one target dir
# rebuilds pyo3 each time (its features differ).
MATURIN_TARGET := target/maturin
# `make wheel` builds in a target dir of its own too: it and `make build` never evict each other.
WHEEL_TARGET := target/wheel
# The oldest manylinux this machine can honestly claim: manylinux2014 (glibc 2.17), the oldest
# glibc Rust's standard library supports. zig (from the `dist` group) links against that glibc;
# without it the audit rejects the wheel for this machine's newer glibc symbols.
MANYLINUX := manylinux2014
# The sdist test keeps compiled crates.io dependencies here between runs (see check_install.sh).
SDIST_TARGET := target/sdist
# Spark master for the packed-environment test: executors in JVMs and folders of their own
# (tests/dist/spark_cluster.sh says why not local[2]).
SPARK_ARCHIVE_MASTER ?= local-cluster[1,2,1024]
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)
# A shell glob, expanded when a recipe runs (after `make wheel` made the file).
WHEEL = dist/topicmatch-$(VERSION)-*.whl
SDIST = dist/topicmatch-$(VERSION).tar.gz
# pyspark is found by its pip install's own location; its spark-submit would look in the
# driver's Python, which in the tests is a venv without pyspark.
SPARK_HOME_OF_VENV = $$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
# loom needs other RUSTFLAGS, which rebuild every dependency: keep it out of the main target.
LOOM_TARGET := target/loom
# Four preemptions bound loom's search (crossbeam's own CI uses two; the CAS races modelled
# here need no more than two forced switches to show). Models that would take minutes at four
# set a lower bound of their own (`model_bounded`, `run2_bounded`). Each model's time is printed
# (`--report-time`, which libtest takes on stable with RUSTC_BOOTSTRAP=1): the stage took 20
# minutes on 2026-11-27, most of CI, and every model over 100 s at four now runs at three
# (633 s -> 96 s, 583 -> 93, 373 -> 67, 165 -> 34, 102 -> 18); at three, the slowest left are
# the two leaf-moving models of gcas.rs (about 125 s each; they searched for their colliding
# words in every execution, a third of their time: 110 -> 73 s alone once found once) and the
# result cache's (109 s).
# The models build in the test-release profile (no LTO, 16 units), as `make test-rust`: the
# one test binary builds faster, and a model ran no slower (10.0 s against release's 14.8 s,
# two_inserts_into_one_cnode_both_land at four preemptions, one run each).
LOOM_MAX_PREEMPTIONS ?= 4

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: all venv build wheel java chromium test test-rust test-loom test-python test-fuzz fuzz lint demo bench clean
.PHONY: test-fuzz-rust test-fuzz-python test-fuzz-build soak soak-rust soak-python valgrind leak-check miri
.PHONY: test-dist test-dist-wheel test-dist-sdist test-dist-spark bench-abi3 bench-amqtt bench-mercure

# Fuzzing: `make test` gives each target a short run; `make fuzz` a long one.
FUZZ_TARGETS := parse differential arrow
FUZZ_SECONDS ?= 30
FUZZ_LONG_SECONDS ?= 3600
CARGO_FUZZ_VERSION := 0.13.2
# The atheris harness of the Python API: its inputs are programs of a few dozen calls.
ATHERIS_MAX_LEN := 512
# Soak: writes per matcher in the Rust soak, rounds of 500 pairs per matcher in the Python one.
SOAK_OPS ?= 1000000
SOAK_ROUNDS ?= 2000
# Leak checks under valgrind: a definite or indirect leak is an error; memory still reachable
# at exit (crossbeam-epoch's global collector, thread-locals) is not a leak.
VALGRIND := valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect \
	--show-leak-kinds=definite,indirect --error-exitcode=1
# The soak binary under valgrind: valgrind runs one thread at a time, and a writer that waits
# for busy readers crawls there, so few writes and one reader.
VALGRIND_SOAK_OPS ?= 1600

all: build

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "maturin==1.16.0"
	touch $@

venv: $(VENV)/.deps

$(VENV)/.dist: $(VENV)/.deps pyproject.toml
	$(BIN)/pip install -q --group dist
	touch $@

# The extension, built in release mode and installed (editable) with the test, lint, bench,
# spark and fuzz extras: the bench extra (the Python peers and matplotlib, about 30 s to install)
# lets the tests that check each peer's answers against ours run in CI; the spark extra
# (PySpark, pyarrow, pandas) serves the Spark tests and `make demo`; the fuzz extra (atheris)
# the Python API's fuzz harness in `make test-fuzz`; the example extra the Mercure hub example.
build: venv
	VIRTUAL_ENV=$(abspath $(VENV)) CARGO_TARGET_DIR=$(MATURIN_TARGET) \
		$(BIN)/maturin develop --release --extras test,lint,bench,spark,fuzz,example --quiet

test: build test-rust test-loom test-python test-fuzz test-dist

# The test-release profile is release without its link-time optimization: built from scratch,
# the ~30 test and bench binaries took 10.8 CPU-minutes against release's 26.9, and the
# slowest test (tests/oracle.rs) ran no slower. `--features arrow` adds tests/arrow.rs and the
# replay of the arrow fuzz corpus. The criterion benches are not built here: in test mode each
# ran one iteration and asserted nothing, and their ten binaries took a sixth of the stage's
# build (97 of 589 CPU-seconds); `make lint` checks them (clippy `--all-targets`) and `make
# bench` runs them. The doc tests run after, on the library already built (seconds).
test-rust:
	cargo test --profile test-release --lib --bins --tests --examples --features arrow
	cargo test --profile test-release --doc --features arrow
	# The binding's own unit tests (its tables with no Python object in them).
	cargo test --profile test-release --lib --features python python::

test-loom:
	@if grep -rqs 'cfg(all(test, loom))' src; then \
		RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) \
		CARGO_TARGET_DIR=$(LOOM_TARGET) RUSTC_BOOTSTRAP=1 cargo test --profile test-release --lib loom \
		-- -Zunstable-options --report-time; \
	else echo "no loom models"; fi

# Spark runs on Java 17; install the headless runtime from Debian only when no java is found.
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }

# Headless Chromium for the Mercure hub's demo-page test, from Debian when missing, as Java.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "chromium not found: installing it"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# Two pytest workers (pytest-xdist), each taking whole files: test_spark.py's sessions then start
# once, in pytest's order (classic, then Connect). 389 s -> 302 s here on 2026-11-27, on two
# cores; a third worker was slower (348 s: the Spark tests slowed the most). `--dist loadgroup`
# would spread the files finer, but xdist 3.8 does not group under pytest 9.2 (it renames the
# node ids through `_nodeid`, which pytest 9.2 no longer reads), so every test ran anywhere.
PYTEST_WORKERS ?= 2
test-python: build java chromium
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests/python

# A release wheel for CPython 3.11 and later (abi3), tagged manylinux2014 with the audit passing,
# and an sdist, both in dist/.
wheel: $(VENV)/.dist
	rm -f dist/topicmatch-$(VERSION)-*.whl $(SDIST)
	PATH="$(BIN):$$PATH" CARGO_TARGET_DIR=$(WHEEL_TARGET) $(BIN)/maturin build --release \
		--zig --compatibility $(MANYLINUX) --auditwheel check --out dist
	$(BIN)/maturin sdist --out dist
	@echo "wheel: $$(ls dist/topicmatch-$(VERSION)-*.whl)"
	@echo "sdist: $(SDIST)"

# The wheel and the sdist, each installed into a new venv and smoke-tested from outside the
# source tree; then Spark executors given the wheel both ways the README shows.
# One after another: run side by side (make -j2), the sdist's build took 204 s beside the Spark
# tests against 140 s alone, and the stage as long as before (362 s against 349, 2026-11-27).
test-dist: test-dist-wheel test-dist-sdist test-dist-spark

test-dist-wheel: wheel
	tests/dist/check_install.sh wheel $(WHEEL)

test-dist-sdist: wheel
	SDIST_CARGO_TARGET=$(SDIST_TARGET) tests/dist/check_install.sh sdist $(SDIST)

test-dist-spark: wheel build java
	$(BIN)/python tests/dist/check_readme.py --wheel $(WHEEL)
	PATH="$(BIN):$$PATH" SPARK_HOME="$(SPARK_HOME_OF_VENV)" \
		tests/dist/spark_cluster.sh archive $(WHEEL) '$(SPARK_ARCHIVE_MASTER)'
	PATH="$(BIN):$$PATH" SPARK_HOME="$(SPARK_HOME_OF_VENV)" \
		tests/dist/spark_cluster.sh nodes $(WHEEL) 'local[2]'

# What abi3 costs on the hot paths: the wheel of `make wheel` against one built the same way
# without the `abi3` cargo feature (so for this CPython only); the README quotes the result.
bench-abi3: wheel
	rm -rf $(WHEEL_TARGET)-cp311/dist
	PATH="$(BIN):$$PATH" CARGO_TARGET_DIR=$(WHEEL_TARGET)-cp311 $(BIN)/maturin build --release \
		--features python --interpreter $(BIN)/python --zig --compatibility $(MANYLINUX) \
		--auditwheel check --out $(WHEEL_TARGET)-cp311/dist
	$(BIN)/python benches/python/abi3_cost.py $(WHEEL) $(WHEEL_TARGET)-cp311/dist/*.whl

# amqtt 0.12.1 against amqtt routed by topicmatch (examples/amqtt_topicmatch): end to end and
# the routing step alone at 1,000 and 10,000 subscriptions; two to four minutes
# (AMQTT_BENCH_ARGS=--quick: under a minute).
AMQTT_BENCH_ARGS ?=
bench-amqtt: build
	$(BIN)/python benches/python/amqtt_routing.py $(AMQTT_BENCH_ARGS)

# The Mercure hub (examples/mercure_hub) with SelectorIndex against the brute-force loop, at 500,
# 2,000 and 5,000 SSE connections, with the plot of latency against connections; a few minutes
# (MERCURE_BENCH_ARGS=--quick: 500 connections, seconds; --shape narrow: one recipient each).
MERCURE_BENCH_ARGS ?=
bench-mercure: build
	mkdir -p bench-out
	$(BIN)/python benches/python/mercure_hub.py --plot bench-out/mercure_hub.png $(MERCURE_BENCH_ARGS)

# cargo fuzz needs unstable flags; RUSTC_BOOTSTRAP=1 lets the stable compiler take them.
# Each run writes new inputs to target/fuzz-corpus/ and reads the committed fuzz/corpus/;
# a crash fails the run and leaves its input in fuzz/artifacts/ (copy it to fuzz/regressions/).
# The targets run under AddressSanitizer. libFuzzer's per-input LeakSanitizer pass runs
# after any input that allocated more than it freed; `differential` turns it off: the CSTrie's
# retired nodes are freed later by crossbeam-epoch, so every input looked like a leak and paid
# for a scan of the whole heap, which halved its speed (924 against 1,803 execs/s in 40 s
# runs). Leaks there are caught by `make leak-check` (valgrind over the corpus the runs
# grew) and by the counting-allocator tests (tests/cstrie_memory.rs, tests/soak.rs). `arrow`
# builds CSTries too, so it runs with the same flag.
FUZZ_FLAGS_parse := -detect_leaks=1
FUZZ_FLAGS_differential := -detect_leaks=0
FUZZ_FLAGS_arrow := -detect_leaks=0
# The targets are built once, then run two at a time with the Python harness (each run is one
# process on one core): four 30 s runs in about a minute rather than two.
test-fuzz: test-fuzz-build build
	$(MAKE) --no-print-directory -j2 --output-sync=target -o build \
		$(addprefix test-fuzz-,$(FUZZ_TARGETS)) test-fuzz-python

test-fuzz-rust: test-fuzz-build
	$(MAKE) --no-print-directory $(addprefix test-fuzz-,$(FUZZ_TARGETS))

test-fuzz-build:
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version $(CARGO_FUZZ_VERSION)
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build --release

.PHONY: $(addprefix test-fuzz-,$(FUZZ_TARGETS))
$(addprefix test-fuzz-,$(FUZZ_TARGETS)): test-fuzz-%:
	@mkdir -p target/fuzz-corpus/$*
	@cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --release $* \
		../target/fuzz-corpus/$* corpus/$* -- -max_total_time=$(FUZZ_SECONDS) \
		$(FUZZ_FLAGS_$*) -print_final_stats=1 2>&1 \
		| grep -E 'Running `|Done|stat::(number_of_executed_units|average_exec_per_sec)|ERROR|panicked|leak' ; \
		exit $${PIPESTATUS[0]}

# atheris on the Python API (fuzz/python/fuzz_api.py); a crash leaves its input in
# fuzz/python/artifacts/ (copy it to fuzz/python/regressions/, which pytest replays).
test-fuzz-python: build
	mkdir -p target/fuzz-corpus/python fuzz/python/artifacts
	$(BIN)/python fuzz/python/fuzz_api.py target/fuzz-corpus/python fuzz/python/corpus \
		-max_total_time=$(FUZZ_SECONDS) -max_len=$(ATHERIS_MAX_LEN) -print_final_stats=1 \
		-artifact_prefix=fuzz/python/artifacts/ 2>&1 \
		| grep -E 'Done|stat::(number_of_executed_units|average_exec_per_sec)|ERROR|Uncaught|Failure|Error' ; \
		exit $${PIPESTATUS[0]}

# An hour per target (FUZZ_LONG_SECONDS), then the leak checks under valgrind.
fuzz:
	$(MAKE) test-fuzz FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)
	$(MAKE) leak-check

# The persistent map's tests under Miri (nightly), which checks the unsafe code of its nodes
# (src/cstrie/hamt/node.rs: one allocation per node, a hand-counted reference) for undefined
# behaviour and leaks. About ten minutes here; not part of `make test`, whose toolchain is
# stable.
miri:
	rustup toolchain install nightly --profile minimal --component miri,rust-src
	cargo +nightly miri test --lib hamt

# valgrind from Debian when it is missing, as `java` does for Java.
valgrind:
	@command -v valgrind >/dev/null 2>&1 || { \
		echo "valgrind not found: installing it"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind; }

# The fuzz corpus and regressions replayed (with the corpus the fuzz runs grew in
# target/fuzz-corpus/), the CSTrie memory test and a short soak, each under valgrind's leak
# checker. It first checks that the checker catches a leak planted on
# purpose (tests/leak_canary.rs), so a passing run cannot be a checker that sees nothing.
LEAK_TESTS := fuzz_regressions cstrie_memory soak
leak-check: valgrind
	cargo test --release --no-run --test leak_canary $(addprefix --test ,$(LEAK_TESTS))
	@canary=$$(cargo test --release --no-run --test leak_canary --message-format=json 2>/dev/null \
		| sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1); \
	if TOPICMATCH_LEAK_CANARY=1 $(VALGRIND) $$canary --test-threads=1 >/dev/null 2>&1; then \
		echo "leak-check: valgrind missed the planted leak"; exit 1; \
	else echo "leak-check: valgrind caught the planted leak, as it should"; fi
	@for t in $(LEAK_TESTS); do \
		exe=$$(cargo test --release --no-run --test $$t --message-format=json 2>/dev/null \
			| sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1); \
		echo "valgrind $$t"; \
		SOAK_OPS=$(VALGRIND_SOAK_OPS) SOAK_READERS=1 FUZZ_CORPUS_EXTRA=$(abspath target/fuzz-corpus) \
			$(VALGRIND) $$exe --test-threads=1 -q || exit 1; \
	done

# Long soaks: SOAK_OPS writes per matcher in Rust (live bytes counted by allocator), then
# SOAK_ROUNDS rounds per matcher from Python (resident memory), then the leak checks.
soak: soak-rust soak-python leak-check

soak-rust:
	SOAK_OPS=$(SOAK_OPS) cargo test --release --test soak -- --nocapture

soak-python: build
	SOAK_ROUNDS=$(SOAK_ROUNDS) $(BIN)/python -m pytest -q -s tests/python/test_soak.py

# clippy on the core alone (no features: the crate as a Rust user builds it), then on every
# target with the bindings and Arrow, then on the loom models.
lint: build
	cargo fmt --all -- --check
	cargo clippy --lib -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings
	# Intra-doc links that do not resolve, or that point past what the docs publish.
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib
	RUSTFLAGS="--cfg loom --cfg crossbeam_loom" CARGO_TARGET_DIR=$(LOOM_TARGET) \
		cargo clippy --release --lib --tests -- -D warnings
	$(BIN)/ruff check python tests benches fuzz/python examples
	$(BIN)/ruff format --check python tests benches fuzz/python examples
	$(BIN)/python -m mypy.stubtest topicmatch._core

# The main job on local Spark: generate a sample, route it with `topicmatch route`, print the
# summary. DEMO_* override the sample (e.g. `make demo DEMO_MESSAGES=100000`).
DEMO_DIR ?= target/demo
DEMO_DIALECT ?= mqtt
DEMO_SUBSCRIPTIONS ?= 100000
DEMO_MESSAGES ?= 1000000
DEMO_MASTER ?= local[*]

demo: build java
	$(BIN)/topicmatch generate --out $(DEMO_DIR)/input --dialect $(DEMO_DIALECT) --format parquet \
		--subscriptions $(DEMO_SUBSCRIPTIONS) --messages $(DEMO_MESSAGES)
	$(BIN)/topicmatch route --dialect $(DEMO_DIALECT) --master '$(DEMO_MASTER)' \
		--subscriptions $(DEMO_DIR)/input/$(DEMO_DIALECT)/subscriptions.parquet \
		--messages $(DEMO_DIR)/input/$(DEMO_DIALECT)/messages.parquet \
		--out $(DEMO_DIR)/out

# The bench extra's exact pins, read from pyproject.toml and installed once.
$(VENV)/.bench: pyproject.toml | venv
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"]))' \
		| xargs $(BIN)/pip install -q
	touch $@

# The whole report: every criterion bench in benches/ (Rust; TOPICMATCH_BENCH_FULL=1 adds the 1M
# sizes of `matchers`, CRITERION_ARGS passes options such as --quick) and `topicmatch bench`
# (Python and peers; BENCH_ARGS=--quick for the five-minute version) into bench-out/.
CRITERION_ARGS ?=
BENCH_ARGS ?=
bench: build $(VENV)/.bench
	cargo bench --bench '*' -- $(CRITERION_ARGS)
	$(BIN)/topicmatch bench --out bench-out $(BENCH_ARGS)

clean:
	rm -rf target dist $(VENV)
