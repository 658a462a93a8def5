"""Checks that the README quotes the commands that tests/dist/spark_cluster.sh runs.

Each block between `# >>> README: NAME` and `# <<< README: NAME` in the script, de-indented,
must appear verbatim in README.md. Prints "readme: N passed, N failed"; exits 1 on a miss.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "dist" / "spark_cluster.sh"
BLOCK = re.compile(r"^\s*# >>> README: (\w+)\n(.*?)^\s*# <<< README: \1\n", re.M | re.S)


def main() -> int:
    readme = (ROOT / "README.md").read_text()
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
    print(f"readme: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
