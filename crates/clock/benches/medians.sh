#!/usr/bin/env bash
# Runs the clock benchmark pinned to one CPU and prints criterion's median per case (ns) as a
# markdown table, for bench/RESULTS.md. Usage: crates/clock/benches/medians.sh [cpu]
set -euo pipefail
cd "$(dirname "$0")/../../.."
cpu="${1:-1}"
target="${CARGO_TARGET_DIR:-target}"
taskset -c "$cpu" cargo bench -p clock --bench clock >&2
echo "| case | median ns | 95% CI |"
echo "|---|---:|---|"
for estimates in "$target"/criterion/{read,record}/*/new/estimates.json; do
    case_name="${estimates#"$target"/criterion/}"
    case_name="${case_name%/new/estimates.json}"
    jq -r --arg name "$case_name" \
        '"| \($name) | \(.median.point_estimate * 100 | round / 100) | \(.median.confidence_interval.lower_bound * 100 | round / 100)–\(.median.confidence_interval.upper_bound * 100 | round / 100) |"' \
        "$estimates"
done
