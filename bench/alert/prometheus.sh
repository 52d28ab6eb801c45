#!/usr/bin/env bash
# The alerting benchmark's side-by-side: the same 1,000 rulesets × 100 histogram streams (5-minute
# window, 1-minute evaluation) as Prometheus 3.5 recording + alerting rules over native histograms,
# and the CPU Prometheus spends evaluating them per cycle: its process CPU per minute with the
# rules loaded, less the same without them (scrapes and TSDB alike in both).
#
# Needs: a Prometheus 3.5 binary (PROMETHEUS, default ~/.cache/strata-bench/bin/prometheus, built
# from the Go module github.com/prometheus/prometheus v0.305.0) and the exporter in
# bench/alert/exporter (go build -o ~/.cache/strata-bench/bin/alert-exporter .).
# Usage: bench/alert/prometheus.sh [minutes per phase, default 5]
set -euo pipefail
MINUTES=${1:-5}
BIN=${BIN:-$HOME/.cache/strata-bench/bin}
PROMETHEUS=${PROMETHEUS:-$BIN/prometheus}
RUN=${RUN:-$HOME/.cache/strata-bench/run-alert}
PORT=19190
EXPORTER_PORT=19191

rm -rf "$RUN" && mkdir -p "$RUN"
cleanup() {
    [ -n "${PROM_PID:-}" ] && kill "$PROM_PID" 2>/dev/null || true
    [ -n "${EXP_PID:-}" ] && kill "$EXP_PID" 2>/dev/null || true
}
trap cleanup EXIT

cat > "$RUN/prometheus.yml" <<YML
global:
  scrape_interval: 30s
  evaluation_interval: 1m
rule_files: ["$RUN/rules.yml"]
scrape_configs:
  - job_name: lat
    scrape_protocols: [PrometheusProto]
    scrape_timeout: 25s
    static_configs: [{targets: ["127.0.0.1:$EXPORTER_PORT"]}]
YML
echo "groups: []" > "$RUN/rules.yml"

rules() {
    echo "groups:"
    for r in $(seq 0 999); do
        cat <<YML
  - name: slow-$r
    interval: 1m
    rules:
      - record: lat_$r:slow_people:5m
        expr: histogram_count(increase(lat_$r[5m])) * histogram_fraction(1.5, +Inf, increase(lat_$r[5m]))
      - alert: slow-$r
        expr: lat_$r:slow_people:5m >= 500
        labels: {severity: "1"}
        annotations: {summary: "{{ \$value }} people on {{ \$labels.host }}"}
      - alert: slow-$r
        expr: lat_$r:slow_people:5m >= 100 < 500
        labels: {severity: "3"}
        annotations: {summary: "{{ \$value }} people on {{ \$labels.host }}"}
YML
    done
}

cpu_s() { # utime + stime of a pid, in seconds
    awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

"$BIN/alert-exporter" -listen "127.0.0.1:$EXPORTER_PORT" > "$RUN/exporter.log" 2>&1 &
EXP_PID=$!
"$PROMETHEUS" --config.file="$RUN/prometheus.yml" --storage.tsdb.path="$RUN/data" \
    --web.listen-address="127.0.0.1:$PORT" --enable-feature=native-histograms \
    > "$RUN/prometheus.log" 2>&1 &
PROM_PID=$!
echo "prometheus $PROM_PID, exporter $EXP_PID; filling 6 minutes of data"
sleep 360

measure() {
    local a b
    a=$(cpu_s "$PROM_PID")
    sleep $((MINUTES * 60))
    b=$(cpu_s "$PROM_PID")
    echo "$a $b" | awk -v m="$MINUTES" '{printf "%.3f", ($2 - $1) / m}'
}

base=$(measure)
echo "without rules: $base CPU-s per minute"
rules > "$RUN/rules.yml"
kill -HUP "$PROM_PID"
sleep 90
with=$(measure)
echo "with rules: $with CPU-s per minute"
q() { curl -s "http://127.0.0.1:$PORT/api/v1/query" --data-urlencode "query=$1" | sed 's/.*"value":\[[^,]*,"\([^"]*\)".*/\1/'; }
groups_s=$(q 'sum(prometheus_rule_group_last_duration_seconds)')
missed=$(q 'sum(prometheus_rule_group_iterations_missed_total)')
firing=$(q 'count(ALERTS{alertstate="firing"})')
series=$(q 'count({__name__=~"lat_.*",__name__!~".*:.*"})')
echo "$base $with" | awk -v g="$groups_s" -v m="$missed" -v f="$firing" -v s="$series" \
    '{printf "prometheus: rule evaluation %.3f CPU-s per cycle (%.3f with rules - %.3f without, per minute); sum of group durations %s s; %s series; %s firing; %s iterations missed\n", $2 - $1, $2, $1, g, s, f, m}'
