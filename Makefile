# topicmatch: `make demo` and `make test` work on a fresh machine (Debian, Rust, Python 3.11).
# Both create .venv here and install the package into it with maturin (release profile).

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
# Two preemptions bound loom's search to seconds per model; crossbeam's own CI uses the same
# bound, and the CAS races modelled here need no more than two forced switches to show.
LOOM_MAX_PREEMPTIONS ?= 2

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: all venv build test test-rust test-loom test-python lint demo clean
.PHONY: wheel test-dist test-dist-wheel test-dist-sdist test-dist-spark bench-abi3

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

# The spark extra's pins, for spark-submit in the distribution tests.
$(VENV)/.spark: $(VENV)/.deps pyproject.toml
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["spark"], sep="\n")' \
		| $(BIN)/pip install -q -r /dev/stdin
	touch $@

# The extension, built in release mode and installed (editable) with the test extras.
build: venv
	VIRTUAL_ENV=$(abspath $(VENV)) CARGO_TARGET_DIR=$(MATURIN_TARGET) \
		$(BIN)/maturin develop --release --extras test,lint --quiet

test: build test-rust test-loom test-python test-dist

test-rust:
	cargo test --release --all-targets

test-loom:
	@if grep -rqs 'cfg(all(test, loom))' src; then \
		RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) \
		CARGO_TARGET_DIR=$(LOOM_TARGET) cargo test --release --lib loom; \
	else echo "no loom models"; fi

test-python: build
	$(BIN)/python -m pytest -q tests/python

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
test-dist: test-dist-wheel test-dist-sdist test-dist-spark

test-dist-wheel: wheel
	tests/dist/check_install.sh wheel $(WHEEL)

test-dist-sdist: wheel
	SDIST_CARGO_TARGET=$(SDIST_TARGET) tests/dist/check_install.sh sdist $(SDIST)

test-dist-spark: wheel $(VENV)/.spark $(VENV)/.dist
	$(BIN)/python tests/dist/check_readme.py
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

lint: build
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches
	$(BIN)/python -m mypy.stubtest topicmatch._core

demo: build
	$(BIN)/python -m topicmatch.cli demo

clean:
	rm -rf target $(VENV) dist
