#!/usr/bin/env bash
# Runs every ingest fuzz target (or the ones named) for SECONDS each (default 120), one at a time,
# with libFuzzer's memory limits (one allocation above 64 MB or a resident size above 512 MB is a
# crash), then minimises each corpus. Needs nightly and cargo-fuzz.
#   crates/ingest/fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-120}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(httptrap statsd collectd graphite influx remote_write remote_write2 otlp flat)
fi
mkdir -p fuzz/logs
for t in "${targets[@]}"; do
    echo "== $t: ${seconds}s"
    cargo +nightly fuzz run "$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=512 -malloc_limit_mb=64 -print_final_stats=1 \
        -max_len=4096 2>&1 | tee "fuzz/logs/$t.log" \
        | grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==|SUMMARY|Done)' || true
    cargo +nightly fuzz cmin "$t" 2>&1 | tail -1
done
