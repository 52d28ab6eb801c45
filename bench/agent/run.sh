#!/usr/bin/env bash
# `strata agent` against Prometheus's node_exporter (built from the Go module proxy at a pinned
# version) collecting the same host: CPU-seconds per collection and resident memory, both read
# from /proc/PID/{stat,status}.
#
# One collection = one reading of the host. The agent reads its one-second counters every
# second and everything else once a period (its defaults: pull mode, 10 s period, no plugins,
# statsd on); node_exporter (its default collectors) collects on each scrape, so it is scraped
# once a second — the same one-second resolution. Each runs alone, pinned to core 1, for
# DURATION seconds after a warm-up; rounds alternate agent and node_exporter, the table gives
# each side's median round. The agent runs twice: at its defaults, and with a 1 s period (every
# series read every second, as node_exporter reads every series per scrape). Also printed: the
# agent's share of one core and its RSS.
#
#   bench/agent/run.sh [ROUNDS] [DURATION_S]          (needs Go and cargo)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
duration=${2:-60}
NODE_EXPORTER_VERSION=v1.9.1
cache=${HOME}/.cache/strata-tests
mkdir -p "$cache/bin"
export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOFLAGS=-buildvcs=false

ne=$cache/bin/node_exporter-$NODE_EXPORTER_VERSION
if [ ! -x "$ne" ]; then
    dir=$(cd /tmp && go mod download -json "github.com/prometheus/node_exporter@$NODE_EXPORTER_VERSION" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    (cd "$dir" && go build -o "$ne" .)
fi
[ "${BUILD_ONLY:-}" = 1 ] && exit 0
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build -j 1 --release -p server >/dev/null 2>&1
strata=$CARGO_TARGET_DIR/release/strata

work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
hz=$(getconf CLK_TCK)

# Prints "cpu_seconds_per_collection rss_kb share_of_one_core" for one run; $1 = period (s).
run_agent() {
    local http statsd
    http=$(port); statsd=$(port)
    cat > "$work/agent.toml" <<TOML
host_id = "bench"
state_dir = "$work/state"
mode = "pull"
listen = "127.0.0.1:$http"
statsd = "127.0.0.1:$statsd"
plugins_dir = "$work/none"
TOML
    taskset -c 1 "$strata" agent --config "$work/agent.toml" --period-s "$1" --log-level warn >/dev/null &
    pid=$!
    sleep 12
    local c0 c1
    c0=$(cpu_ticks "$pid")
    sleep "$duration"
    c1=$(cpu_ticks "$pid")
    local rss; rss=$(rss_kb "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    python3 -c "c=($c1-$c0)/$hz; print(f'{c/$duration:.6f} $rss {100*c/$duration:.3f}')"
}

run_node_exporter() {
    local p; p=$(port)
    taskset -c 1 "$ne" --web.listen-address="127.0.0.1:$p" --log.level=warn >/dev/null 2>&1 &
    pid=$!
    sleep 2
    for _ in 1 2 3; do curl -s "http://127.0.0.1:$p/metrics" >/dev/null; sleep 1; done
    local c0 c1
    c0=$(cpu_ticks "$pid")
    for _ in $(seq "$duration"); do
        taskset -c 0 curl -s "http://127.0.0.1:$p/metrics" >/dev/null
        sleep 1
    done
    c1=$(cpu_ticks "$pid")
    local rss; rss=$(rss_kb "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    python3 -c "c=($c1-$c0)/$hz; print(f'{c/$duration:.6f} $rss {100*c/$duration:.3f}')"
}

: > "$work/agent"; : > "$work/agent1"; : > "$work/ne"
for r in $(seq "$rounds"); do
    run_agent 10 | tee -a "$work/agent"
    run_agent 1 | tee -a "$work/agent1"
    run_node_exporter | tee -a "$work/ne"
done
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
a_cpu=$(awk '{print $1}' "$work/agent" | median); a_rss=$(awk '{print $2}' "$work/agent" | median)
a_core=$(awk '{print $3}' "$work/agent" | median)
n_cpu=$(awk '{print $1}' "$work/ne" | median); n_rss=$(awk '{print $2}' "$work/ne" | median)
b_cpu=$(awk '{print $1}' "$work/agent1" | median); b_rss=$(awk '{print $2}' "$work/agent1" | median)
b_core=$(awk '{print $3}' "$work/agent1" | median)
echo "agent (10 s period): $a_cpu CPU-s per collection, RSS $a_rss kB, $a_core % of one core"
echo "agent (1 s period):  $b_cpu CPU-s per collection, RSS $b_rss kB, $b_core % of one core"
echo "node_exporter: $n_cpu CPU-s per collection, RSS $n_rss kB"
python3 -c "print(f'node_exporter / agent: CPU {$n_cpu/max($a_cpu,1e-9):.1f}x (1 s period {$n_cpu/max($b_cpu,1e-9):.1f}x), RSS {$n_rss/$a_rss:.1f}x')"
