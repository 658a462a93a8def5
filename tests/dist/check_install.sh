#!/usr/bin/env bash
# Installs a built wheel or sdist into a new, empty virtual environment outside the source tree
# and runs the smoke suite there, from a folder that cannot see the checkout.
#
#   tests/dist/check_install.sh wheel dist/topicmatch-0.1.0-cp311-abi3-....whl
#   tests/dist/check_install.sh sdist dist/topicmatch-0.1.0.tar.gz
#
# wheel: pip gets --no-index, so nothing but the wheel itself can be installed.
# sdist: the venv holds pip only; pip fetches the build backend named in pyproject.toml
# (maturin) into an isolated build environment and cargo builds the crate from the unpacked
# sdist. --no-cache-dir, so pip cannot hand back a wheel it built from an earlier sdist of the
# same name. SDIST_CARGO_TARGET (optional) is a cargo target dir kept between runs: it caches
# the compiled crates.io dependencies only, since topicmatch itself is compiled anew from the
# unpacked sdist (cargo keys a path crate by its path, which is new each time).
set -euo pipefail

kind=${1:?wheel or sdist}
artifact=$(realpath "${2:?path to the wheel or sdist}")
src=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$src/Cargo.toml" | head -n 1)

work=$(mktemp -d "${TMPDIR:-/tmp}/topicmatch-$kind.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS

"$python" -m venv "$work/venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1
case $kind in
wheel)
    "$work/venv/bin/pip" install -q --no-index "$artifact"
    ;;
sdist)
    if [[ -n ${SDIST_CARGO_TARGET:-} ]]; then
        mkdir -p "$SDIST_CARGO_TARGET"
        export CARGO_TARGET_DIR=$(realpath "$SDIST_CARGO_TARGET")
        # Drop the topicmatch units of earlier runs (each had another path): they are never
        # reused and would pile up.
        find "$CARGO_TARGET_DIR" -maxdepth 3 \( -name 'topicmatch-*' -o -name 'libtopicmatch*' \
            -o -name '_core*' \) -prune -exec rm -rf {} + 2>/dev/null || true
    else
        unset CARGO_TARGET_DIR
    fi
    "$work/venv/bin/pip" install -q --no-cache-dir "$artifact"
    ;;
*)
    echo "usage: $0 wheel|sdist FILE" >&2
    exit 2
    ;;
esac
echo "$kind: installed $(basename "$artifact") into a new venv in $((SECONDS - start)) s"

# Only the smoke suite goes into the folder it runs from; -I keeps the script's folder, the
# current folder and PYTHON* variables off sys.path.
mkdir "$work/run"
cp "$src/tests/dist/smoke.py" "$work/run/"
cd "$work/run"
"$work/venv/bin/python" -I smoke.py --source "$src" --version "$version"
