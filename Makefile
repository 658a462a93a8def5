# topicmatch: `make demo` and `make test` work on a fresh machine (Debian, Rust, Python 3.11).
# Both create .venv here and install the package into it with maturin (release profile).

PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
# maturin gets a target dir of its own: alternating it with `cargo test` in one target dir
# rebuilds pyo3 each time (its features differ).
MATURIN_TARGET := target/maturin
# loom needs other RUSTFLAGS, which rebuild every dependency: keep it out of the main target.
LOOM_TARGET := target/loom
# Two preemptions bound loom's search to seconds per model; crossbeam's own CI uses the same
# bound, and the CAS races modelled here need no more than two forced switches to show.
LOOM_MAX_PREEMPTIONS ?= 2

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: all venv build wheel java test test-rust test-loom test-python lint demo clean

all: build

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "maturin==1.16.0"
	touch $@

venv: $(VENV)/.deps

# The extension, built in release mode and installed (editable) with the test, lint and spark
# extras (PySpark, pyarrow, pandas: the Spark tests and `make demo` need them).
build: venv
	VIRTUAL_ENV=$(abspath $(VENV)) CARGO_TARGET_DIR=$(MATURIN_TARGET) \
		$(BIN)/maturin develop --release --extras test,lint,spark --quiet

# The wheel to install on Spark executors (and anywhere else): dist/topicmatch-*.whl.
wheel: venv
	VIRTUAL_ENV=$(abspath $(VENV)) CARGO_TARGET_DIR=$(MATURIN_TARGET) \
		$(BIN)/maturin build --release --out dist --quiet

test: build test-rust test-loom test-python

test-rust:
	cargo test --release --all-targets

test-loom:
	@if grep -rqs 'cfg(all(test, loom))' src; then \
		RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) \
		CARGO_TARGET_DIR=$(LOOM_TARGET) cargo test --release --lib loom; \
	else echo "no loom models"; fi

# Spark runs on Java 17; install the headless runtime from Debian only when no java is found.
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }

test-python: build java
	$(BIN)/python -m pytest -q tests/python

lint: build
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches

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

clean:
	rm -rf target dist $(VENV)
