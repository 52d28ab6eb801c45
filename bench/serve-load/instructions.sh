#!/usr/bin/env bash
# Server instructions per sample for one serve-load run, under callgrind: startup and the
# shutdown flush are not counted (instrumentation is switched on once the server listens and
# off when the load ends). Deterministic where CPU-seconds on a shared machine are not: use it
# to compare builds, and CPU-seconds (serve-load, forms.sh) for the figures themselves.
#
# usage: bench/serve-load/instructions.sh STRATA_BINARY TAG [serve-load args...]
#   e.g. bench/serve-load/instructions.sh target/release/strata new --workload httptrap-hist \
#        --hist-steps 30
# Prints `TAG samples=N instr=I per_sample=I/N`; keeps /tmp/cg-TAG.out for callgrind_annotate.
# Needs valgrind; build serve-load first (cargo build --release -p serve-load).
set -euo pipefail
bin=${1:?strata binary}
tag=${2:?tag}
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
port=18199
data=$(mktemp -d)
log=/tmp/cg-$tag.log
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="/tmp/cg-$tag.out" \
    "$bin" serve --http "127.0.0.1:$port" --statsd off --graphite off --data-dir "$data" \
    >"$log" 2>&1 &
server=$!
for _ in $(seq 600); do
    grep -q listening "$log" && break
    sleep 0.1
done
callgrind_control -i on "$server" >/dev/null
run=$("$root/target/release/serve-load" "$@" --url "http://127.0.0.1:$port" --pid "$server" \
    --runs 1 2>&1 | grep '^run 0')
callgrind_control -i off "$server" >/dev/null
kill -TERM "$server"
wait "$server" || true
rm -rf "$data"
samples=$(echo "$run" | sed -n 's/.*: \([0-9]*\) samples in.*/\1/p')
total=$(callgrind_annotate "/tmp/cg-$tag.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "$tag samples=$samples instr=$total per_sample=$((total / samples))"
