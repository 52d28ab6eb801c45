#!/usr/bin/env bash
# Instructions the store executes for storebench's histogram shape, under callgrind: only
# Store::write, Store::flush, Store::resolve_all and storebench's push_chunk (every WriteBatch
# push) are counted, not the generator, nor opening and closing the store. Deterministic, so it
# compares two builds where this shared VM's CPU-time runs spread ±8 %; memory-bound changes
# still need timing. The names are exact and never nest: callgrind's --toggle-collect flips at
# every match, so `WriteBatch::push*` (push_id_bins → push_id_incoming → push_sample) had left
# the bin check uncounted before 2026-11-26.
#   bench/storebench/instructions.sh [STOREBENCH_BINARY] [HOURS]
set -euo pipefail
bin=${1:-target/release/storebench}
hours=${2:-1}
out=$(mktemp /tmp/storebench-callgrind.XXXXXX)
valgrind --tool=callgrind --callgrind-out-file="$out" \
    --toggle-collect='store::db::Store::write' \
    --toggle-collect='store::db::Store::flush' \
    --toggle-collect='store::db::Store::resolve_all' \
    --toggle-collect='storebench::run::push_chunk' \
    "$bin" --shape histogram --api ids --hours "$hours" >/dev/null 2>"$out.log"
echo "instructions: $(grep '^summary:' "$out" | cut -d' ' -f2) (profile: $out; callgrind_annotate --inclusive=yes $out)"
