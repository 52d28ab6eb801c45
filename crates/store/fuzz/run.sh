#!/usr/bin/env bash
# Fuzzes every store target (or the ones named) for SECONDS each (default 120), one after another.
# libFuzzer limits make unbounded allocation a failure: one allocation over 64 MB or a resident
# size over 1 GB is reported as a crash. Needs nightly and cargo-fuzz.
#   crates/store/fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-120}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(numeric_chunk text_chunk rice_histogram_chunk packed_histogram_chunk index_replay key_and_query wal_record block_file manifest_file)
fi
mkdir -p logs
for t in "${targets[@]}"; do
    echo "== $t: ${seconds}s"
    # New inputs go to a scratch corpus; the checked-in corpus/ stays the curated seeds.
    mkdir -p "scratch/$t"
    cargo +nightly fuzz run "$t" "scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024 -malloc_limit_mb=64 -max_len=8192 \
        -print_final_stats=1 2>&1 | tee "logs/$t.log" \
        | grep -E '^(Done|SUMMARY|stat::number_of_executed_units)|panicked|ERROR' || true
done
