#!/usr/bin/env bash
# Runs the parser fuzz target for SECONDS (default 240) with libFuzzer's memory limits, then
# minimises the corpus. Needs nightly and cargo-fuzz.   crates/query/fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-240}
mkdir -p fuzz/logs
cargo +nightly fuzz run parse -- \
    -max_total_time="$seconds" -rss_limit_mb=512 -malloc_limit_mb=64 -print_final_stats=1 \
    -dict=fuzz/caql.dict \
    2>&1 | tee fuzz/logs/parse.log | grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==|SUMMARY|Done)' || true
cargo +nightly fuzz cmin parse 2>&1 | tail -1
