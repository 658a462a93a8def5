#!/usr/bin/env bash
# The two ways to get the topicmatch wheel to Spark executors, as the README shows them: this
# script is what `make test-dist` runs, and the README quotes the blocks between the
# `>>> README` and `<<< README` markers verbatim (tests/dist/check_readme.py checks it).
#
#   tests/dist/spark_cluster.sh archive WHEEL [MASTER]   # packed venv shipped with --archives
#   tests/dist/spark_cluster.sh nodes WHEEL [MASTER]     # wheel pip-installed on every node
#
# MASTER defaults to local-cluster[1,2,1024]: a standalone master, worker and executor JVM on
# this machine. Under local[N] the executors live in the driver's JVM and run in its folder,
# while Spark unpacks --archives into its SparkFiles folder, so ./environment/bin/python does
# not resolve there; a local-cluster executor, like a YARN, Kubernetes or standalone one, runs
# in its own working folder with the archive unpacked into it. spark-submit and venv-pack come
# from PATH and SPARK_HOME must be set (the Makefile puts .venv/bin first and points SPARK_HOME
# at the pip-installed pyspark, whose spark-submit would otherwise look for pyspark in the
# driver's Python). Runs in a temporary folder, which it removes.
set -euo pipefail

way=${1:?archive or nodes}
WHEEL=$(realpath "${2:?path to the wheel}")
MASTER=${3:-local-cluster[1,2,1024]}
JOB=$(cd "$(dirname "$0")" && pwd)/spark_job.py
: "${SPARK_HOME:?set SPARK_HOME to the Spark installation}"

work=$(mktemp -d "${TMPDIR:-/tmp}/topicmatch-spark.XXXXXX")
# local-cluster workers put their executors' folders (app-*) in $SPARK_HOME/work, whatever
# SPARK_WORKER_DIR says: remove the ones this run made, with the temporary folder.
spark_work=$SPARK_HOME/work
existing=$(ls "$spark_work" 2>/dev/null || true)
cleanup() {
    rm -rf "$work"
    for d in "$spark_work"/app-*; do
        if [[ -e $d ]] && ! grep -qxF "$(basename "$d")" <<<"$existing"; then rm -rf "$d"; fi
    done
    rmdir "$spark_work" 2>/dev/null || true
}
trap cleanup EXIT
cd "$work"
export PIP_DISABLE_PIP_VERSION_CHECK=1

case $way in
archive)
    export SPARK_JOB_EXPECT=archive  # what spark_job.py checks on its executors
    # >>> README: archive
    python3 -m venv topicmatch-env
    topicmatch-env/bin/pip install -q "$WHEEL"
    venv-pack --quiet -p topicmatch-env -o topicmatch-env.tar.gz
    PYSPARK_DRIVER_PYTHON=topicmatch-env/bin/python PYSPARK_PYTHON=./environment/bin/python \
        spark-submit --master "$MASTER" --archives topicmatch-env.tar.gz#environment "$JOB"
    # <<< README: archive
    ;;
nodes)
    # NODE_ENV stands for the same path on every node (here, a folder of this machine).
    NODE_ENV=$work/opt/topicmatch
    export SPARK_JOB_EXPECT=prefix=$NODE_ENV
    # >>> README: nodes
    python3 -m venv "$NODE_ENV"
    "$NODE_ENV/bin/pip" install -q "$WHEEL"
    spark-submit --master "$MASTER" --conf spark.pyspark.python="$NODE_ENV/bin/python" "$JOB"
    # <<< README: nodes
    ;;
*)
    echo "usage: $0 archive|nodes WHEEL [MASTER]" >&2
    exit 2
    ;;
esac
