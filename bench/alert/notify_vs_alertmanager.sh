#!/usr/bin/env bash
# Notification delivery throughput side by side: Strata's notifier (one receiver's worker,
# release build) and Alertmanager v0.28.1 each deliver the same 10,000 alerts — each its own
# group — as webhooks to the same local receiver, in alternated rounds (Strata, Alertmanager,
# Strata, …); the figure is each side's median. Everything (the benchmark process, its
# receiver, Alertmanager as its child) runs pinned to core 1, as bench/RESULTS.md's preamble
# says.
#
# Needs: Alertmanager v0.28.1 (ALERTMANAGER, default ~/.cache/strata-tests/bin/alertmanager-v0.28.1,
# built from the Go module github.com/prometheus/alertmanager v0.28.1; `cargo test -p alert
# --test notify` builds it there when missing).
# Usage: bench/alert/notify_vs_alertmanager.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ALERTMANAGER=${ALERTMANAGER:-$HOME/.cache/strata-tests/bin/alertmanager-v0.28.1}
[ -x "$ALERTMANAGER" ] || { echo "no Alertmanager at $ALERTMANAGER" >&2; exit 1; }
cargo bench -j 1 -p alert --bench notify_deliver --no-run
BENCH=$(cargo bench -j 1 -p alert --bench notify_deliver --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*notify_deliver[^"]*\)".*/\1/p' | tail -1)
taskset -c 1 "$BENCH" --alertmanager "$ALERTMANAGER"
