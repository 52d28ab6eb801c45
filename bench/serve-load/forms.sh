#!/usr/bin/env bash
# The same histograms sent three ways, alternated: JSON `H[..]=n` strings, JSON base64, and the
# flatbuffers metric list. Prints one line per round and encoding: the median of 3 runs in
# histograms per server CPU-second, and the load average when it finished.
#
# usage: bench/serve-load/forms.sh ROUNDS STRATA_BINARY [PLAN_CACHE_DIR]
# Build first: STRATA_UI_SKIP_BUILD=1 cargo build --release -p server -p serve-load
set -euo pipefail
rounds=${1:?rounds}
strata=${2:?strata binary}
plans=${3:-/tmp/plans}
cd "$(dirname "$0")/../.."
mkdir -p "$plans"
for round in $(seq "$rounds"); do
    for workload in httptrap-hist httptrap-hist-b64 httptrap-hist-flat; do
        median=$(taskset -c 1 target/release/serve-load --workload "$workload" --hist-steps 30 \
            --spawn "$strata" --server-cpu 0 --runs 3 --plan-cache "$plans" 2>&1 |
            sed -n 's/^median of .*: \([0-9]*\) samples\/server-CPU-s.*/\1/p')
        echo "round $round $workload ${median:?no median line} $(cut -d' ' -f1 /proc/loadavg)"
    done
done
