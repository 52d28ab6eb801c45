#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for SECONDS each (default 240), one at a time, with
# libFuzzer's memory limits: a single allocation above 64 MB or a resident size above 512 MB is
# reported as a crash. Then minimises each corpus. Needs nightly and cargo-fuzz.
#   crates/hist/fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-240}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(decode_binary decode_base64 parse_text convert)
fi
mkdir -p fuzz/logs
for t in "${targets[@]}"; do
    echo "== $t: ${seconds}s"
    cargo +nightly fuzz run "$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=512 -malloc_limit_mb=64 -print_final_stats=1 \
        2>&1 | tee "fuzz/logs/$t.log" | grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==|SUMMARY|Done)' || true
    cargo +nightly fuzz cmin "$t" 2>&1 | tail -1
done
