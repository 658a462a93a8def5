"""Checks that README.md says what the code does.

1. **Quotes.** Each block between `# >>> README: NAME` and `# <<< README: NAME` in
   tests/dist/spark_cluster.sh, de-indented, must appear verbatim in README.md.
2. **Examples.** Every ```python block of README.md runs, in the README's order, and must not
   raise. A failure names the block's first line (`README.md:LINE`) and its traceback counts
   lines of README.md.

       tests/dist/check_readme.py --wheel dist/topicmatch-*.whl   # what `make test-dist` runs
       tests/dist/check_readme.py --python .venv/bin/python       # an interpreter of your own
       tests/dist/check_readme.py                                 # this interpreter

   With --wheel, the wheel is installed with `pip --no-index` into a new venv in a temporary
   folder (as tests/dist/check_install.sh installs it), and the blocks run with that venv's
   `python -I` from an empty folder outside the checkout, so the source tree cannot be
   imported instead of the installed package.

Conventions for README.md's code blocks (an HTML comment does not show on the rendered page):

- A ```python block runs in a fresh namespace.
- `<!-- readme: continue -->` as the last non-blank line before a block's opening fence: the
  block runs in the namespace the previous ```python block left (its imports and names).
- `<!-- readme: no-run -->` there instead: the block is not run. For blocks that need Spark, a
  cluster, a network, or names the reader supplies (`messages_df`).
- Blocks in any other language (```sh, ```text, plain ```) are never run.

Prints one line per check and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SCRIPT = ROOT / "tests" / "dist" / "spark_cluster.sh"
BLOCK = re.compile(r"^\s*# >>> README: (\w+)\n(.*?)^\s*# <<< README: \1\n", re.M | re.S)
FENCE = re.compile(r"^(\s*)```(\S*)")
CONTINUE = "<!-- readme: continue -->"
NO_RUN = "<!-- readme: no-run -->"

# Runs in the interpreter under test: reads the blocks, runs each, prints a JSON verdict.
RUNNER = r"""
import contextlib, io, json, sys, traceback

blocks = json.load(open(sys.argv[1]))
results = []
ns = {}
for b in blocks:
    if not b["continues"]:
        ns = {"__name__": "__readme__"}
    # Padded with blank lines so that tracebacks give README.md's own line numbers.
    code = compile("\n" * (b["first_code_line"] - 1) + b["code"], b["path"], "exec")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, ns)
    except BaseException as e:
        # The traceback from the block's own frame on: the runner's frame says nothing.
        error = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        results.append({"line": b["line"], "error": error, "out": out.getvalue()})
    else:
        results.append({"line": b["line"], "error": None, "out": out.getvalue()})
import topicmatch
print(json.dumps({"results": results, "topicmatch": topicmatch.__file__}))
"""


@dataclass
class Block:
    line: int  # the opening fence's line
    first_code_line: int
    code: str
    continues: bool
    path: str


def check_quotes(readme: str) -> tuple[int, int]:
    blocks = BLOCK.findall(SCRIPT.read_text())
    passed = failed = 0
    for name, body in blocks:
        if textwrap.dedent(body) in readme:
            passed += 1
        else:
            failed += 1
            print(f"README.md does not quote the '{name}' block of {SCRIPT.name}:")
            print(textwrap.dedent(body))
    if not blocks:
        failed += 1
        print(f"no README blocks in {SCRIPT}")
    print(f"readme quotes: {passed} passed, {failed} failed")
    return passed, failed


def python_blocks(text: str) -> tuple[list[Block], list[int]]:
    """The ```python blocks to run, and the lines of those marked not to run."""
    lines = text.splitlines()
    run: list[Block] = []
    skipped: list[int] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        end = i + 1
        while end < len(lines) and not re.match(rf"^{indent}```\s*$", lines[end]):
            end += 1
        if lang == "python":
            before = next((s.strip() for s in reversed(lines[:i]) if s.strip()), "")
            if before == NO_RUN:
                skipped.append(i + 1)
            else:
                code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
                run.append(Block(i + 1, i + 2, code, before == CONTINUE, README.name))
        i = end + 1
    return run, skipped


def interpreter_of_wheel(wheel: Path, work: Path) -> Path:
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-index", str(wheel.resolve())]
    subprocess.run(pip, check=True, env=env)
    return venv / "bin" / "python"


def check_examples(text: str, python: Path, work: Path, isolated: bool) -> tuple[int, int]:
    blocks, skipped = python_blocks(text)
    if not blocks:
        print("readme examples: no ```python block to run in README.md")
        return 0, 1
    run_dir = work / "run"
    run_dir.mkdir()
    (run_dir / "blocks.json").write_text(json.dumps([asdict(b) for b in blocks]))
    (run_dir / "runner.py").write_text(RUNNER)
    cmd = [str(python), *(["-I"] if isolated else []), "runner.py", "blocks.json"]
    proc = subprocess.run(cmd, cwd=run_dir, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"readme examples: the runner failed ({python}):\n{proc.stdout}{proc.stderr}")
        return 0, 1
    verdict = json.loads(proc.stdout.splitlines()[-1])
    passed = failed = 0
    for r in verdict["results"]:
        if r["error"] is None:
            passed += 1
        else:
            failed += 1
            print(f"{README.name}:{r['line']}: this python block raised:")
            print(textwrap.indent(r["out"] + r["error"], "    "))
    not_run = f", not run: lines {', '.join(map(str, skipped))}" if skipped else ""
    print(
        f"readme examples: {passed} passed, {failed} failed{not_run} "
        f"(topicmatch from {verdict['topicmatch']})"
    )
    return passed, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--wheel", type=Path, help="install this wheel into a new venv first")
    where.add_argument("--python", type=Path, help="an interpreter with topicmatch installed")
    args = parser.parse_args()

    readme = README.read_text()
    _, quotes_failed = check_quotes(readme)
    with tempfile.TemporaryDirectory(prefix="topicmatch-readme.") as tmp:
        work = Path(tmp)
        if args.wheel:
            python, isolated = interpreter_of_wheel(args.wheel, work), True
        else:
            # absolute() and not resolve(): a venv's python is a link that must stay one.
            python, isolated = (args.python or Path(sys.executable)).absolute(), False
        _, examples_failed = check_examples(readme, python, work, isolated)
    return 1 if quotes_failed or examples_failed else 0


if __name__ == "__main__":
    sys.exit(main())
