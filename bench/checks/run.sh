#!/usr/bin/env bash
# Probes per CPU-second of the checks crate against Prometheus's blackbox_exporter (built from
# the Go module proxy at a pinned version), for http, https, tcp, dns and ping against the same
# loopback targets, and Prometheus text parsing per CPU-second against Prometheus's own parser
# (github.com/prometheus/common/expfmt).
#
# Both probers run pinned to core 1 (`taskset`), everything else (the targets, dnsmasq, the
# client asking blackbox_exporter for probes) to core 0. Ours is timed in-process
# (CLOCK_PROCESS_CPUTIME_ID around N sequential runs on one thread); blackbox_exporter's CPU
# is read from /proc/PID/stat around N sequential /probe requests. Rounds alternate ours and
# theirs; the table gives each side's median round.
#
#   bench/checks/run.sh [ROUNDS]        (needs root for ICMP raw sockets and apt-get, Go, cargo)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
BLACKBOX_VERSION=v0.27.0
cache=${HOME}/.cache/strata-tests
mkdir -p "$cache/bin"
export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOFLAGS=-buildvcs=false

# --- builds -------------------------------------------------------------------------------
bbe=$cache/bin/blackbox_exporter-$BLACKBOX_VERSION
if [ ! -x "$bbe" ]; then
    dir=$(cd /tmp && go mod download -json "github.com/prometheus/blackbox_exporter@$BLACKBOX_VERSION" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    (cd "$dir" && go build -o "$bbe" .)
fi
textparse=$cache/bin/textparse-$(sha256sum bench/checks/textparse/main.go bench/checks/textparse/go.sum | sha256sum | cut -c1-16)
[ -x "$textparse" ] || (cd bench/checks/textparse && go build -mod=readonly -o "$textparse" .)
ours=$(cargo bench -p checks --bench probes --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="probes" and m.get("executable"): print(m["executable"])')
[ -x /usr/sbin/dnsmasq ] || { apt-get update && apt-get install -y dnsmasq-base; }

# --- targets ------------------------------------------------------------------------------
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_port=$(port); https_port=$(port); tcp_port=$(port); dns_port=$(port); bbe_port=$(port)
taskset -c 0 "$ours" serve "$http_port" "$https_port" "$tcp_port" "$work" > "$work/serve.log" &
pids+=($!)
taskset -c 0 /usr/sbin/dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
    --bind-interfaces --listen-address=127.0.0.1 --port="$dns_port" --pid-file= --user=root \
    --host-record=strata.test,10.1.2.3 &
pids+=($!)
cat > "$work/blackbox.yml" <<EOF
modules:
  http: {prober: http, timeout: 5s, http: {preferred_ip_protocol: ip4}}
  https: {prober: http, timeout: 5s, http: {preferred_ip_protocol: ip4, tls_config: {ca_file: $work/ca.pem}}}
  tcp: {prober: tcp, timeout: 5s, tcp: {preferred_ip_protocol: ip4}}
  dns: {prober: dns, timeout: 5s, dns: {query_name: strata.test, query_type: A, transport_protocol: udp, preferred_ip_protocol: ip4}}
  ping: {prober: icmp, timeout: 5s, icmp: {preferred_ip_protocol: ip4}}
EOF
for _ in $(seq 100); do [ -s "$work/ca.pem" ] && break; sleep 0.1; done
taskset -c 1 "$bbe" --config.file="$work/blackbox.yml" --web.listen-address="127.0.0.1:$bbe_port" \
    --log.level=error > "$work/bbe.log" 2>&1 &
bbe_pid=$!
pids+=($bbe_pid)
sleep 1

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# kind, our target, our config, blackbox target, probes per round
cases=(
    "http|http://127.0.0.1:$http_port/|{}|http://127.0.0.1:$http_port/|2000"
    "https|https://127.0.0.1:$https_port/|{\"ca_file\":\"$work/ca.pem\"}|https://127.0.0.1:$https_port/|800"
    "tcp|127.0.0.1:$tcp_port|{}|127.0.0.1:$tcp_port|3000"
    "dns|strata.test|{\"server\":\"127.0.0.1:$dns_port\"}|127.0.0.1:$dns_port|3000"
    "ping|127.0.0.1|{\"count\":1}|127.0.0.1|2000"
)
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| probe | checks (probes/CPU-s) | blackbox_exporter $BLACKBOX_VERSION (probes/CPU-s) | ratio |"
echo "|---|---|---|---|"
for c in "${cases[@]}"; do
    IFS='|' read -r kind target config bbe_target n <<< "$c"
    : > "$work/ours"; : > "$work/theirs"
    for _ in $(seq "$rounds"); do
        out=$(taskset -c 1 "$ours" probe "$kind" "$target" "$n" "$config")
        up=$(sed 's/.*up=\([0-9]*\).*/\1/' <<< "$out")
        [ "$up" = "$n" ] || { echo "ours: $kind: only $up of $n up" >&2; exit 1; }
        cpu_ns=$(sed 's/cpu_ns=\([0-9]*\).*/\1/' <<< "$out")
        python3 -c "print($n / ($cpu_ns / 1e9))" >> "$work/ours"
        url="http://127.0.0.1:$bbe_port/probe?module=$kind&target=$bbe_target"
        before=$(cpu_ticks "$bbe_pid")
        out=$(taskset -c 0 "$ours" blackbox "$url" "$n")
        after=$(cpu_ticks "$bbe_pid")
        up=$(sed 's/.*up=\([0-9]*\).*/\1/' <<< "$out")
        [ "$up" = "$n" ] || { echo "blackbox_exporter: $kind: only $up of $n up" >&2; exit 1; }
        python3 -c "print($n / (($after - $before) / $hz))" >> "$work/theirs"
    done
    o=$(median < "$work/ours"); t=$(median < "$work/theirs")
    python3 -c "print(f'| $kind | {$o:,.0f} | {$t:,.0f} | {$o/$t:.2f}x |')"
done

# --- text parsing -------------------------------------------------------------------------
python3 - "$work/payload.prom" <<'EOF'
import sys, random
random.seed(1)
out = []
for f in range(100):
    name = f"app_requests_{f}_total"
    out.append(f"# HELP {name} Requests handled by handler {f}.\n# TYPE {name} counter\n")
    for i in range(20):
        out.append(f'{name}{{code="{200 + i % 5}",method="GET",path="/api/v1/item/{i}"}} {random.randrange(10**9)}\n')
for f in range(20):
    name = f"app_latency_{f}_seconds"
    out.append(f"# HELP {name} Latency.\n# TYPE {name} histogram\n")
    for s in range(5):
        c = 0
        for le in ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]:
            c += random.randrange(1000)
            out.append(f'{name}_bucket{{service="s{s}",le="{le}"}} {c}\n')
        out.append(f'{name}_sum{{service="s{s}"}} {random.random() * 1000:.3f}\n{name}_count{{service="s{s}"}} {c}\n')
open(sys.argv[1], "w").write("".join(out))
EOF
parses=300
: > "$work/ours"; : > "$work/theirs"
for _ in $(seq "$rounds"); do
    out=$(taskset -c 1 "$ours" parse "$work/payload.prom" "$parses")
    cpu_ns=$(sed 's/cpu_ns=\([0-9]*\).*/\1/' <<< "$out")
    python3 -c "print($parses / ($cpu_ns / 1e9))" >> "$work/ours"
    out=$(taskset -c 1 "$textparse" "$work/payload.prom" "$parses")
    cpu_ns=$(sed 's/cpu_ns=\([0-9]*\).*/\1/' <<< "$out")
    python3 -c "print($parses / ($cpu_ns / 1e9))" >> "$work/theirs"
done
o=$(median < "$work/ours"); t=$(median < "$work/theirs")
size=$(stat -c %s "$work/payload.prom")
echo
echo "| text parse ($size bytes, 3,400 series) | checks (parses/CPU-s) | expfmt.TextParser (parses/CPU-s) | ratio |"
echo "|---|---|---|---|"
python3 -c "print(f'| text 0.0.4 | {$o:,.1f} | {$t:,.1f} | {$o/$t:.2f}x |')"
