"""Replays the atheris corpus and every crash it found (fuzz/python/corpus/,
fuzz/python/regressions/) through the harness's checks, so a fixed crash stays fixed without
running the fuzzer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[2] / "fuzz" / "python"


def load_harness():
    if "fuzz_api" not in sys.modules:  # pickling its subscribers needs it importable by name
        spec = importlib.util.spec_from_file_location("fuzz_api", FUZZ / "fuzz_api.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["fuzz_api"] = module
        spec.loader.exec_module(module)
    return sys.modules["fuzz_api"]


INPUTS = sorted(
    p for d in ("corpus", "regressions") for p in (FUZZ / d).iterdir() if not p.name.startswith(".")
)


def test_the_corpus_is_not_empty():
    assert any(p.parent.name == "corpus" for p in INPUTS)
    assert any(p.parent.name == "regressions" for p in INPUTS)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: f"{p.parent.name}/{p.name[:16]}")
def test_fuzz_input_holds(path):
    load_harness().run_one(path.read_bytes())
