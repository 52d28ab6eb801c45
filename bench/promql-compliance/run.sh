#!/usr/bin/env bash
# The official PromQL compliance tester (github.com/prometheus/compliance, `promql/`) run
# against Strata, with a real Prometheus 3.5 as the reference: three demo services are scraped
# every 5 s by Prometheus, which remote-writes everything to Strata; after enough data the
# tester runs the suite's own queries (only the demo hosts' address changed) against both.
#
# usage: bench/promql-compliance/run.sh [all|build|start|test|stop|status]
#   all    (default) build, start, wait $WAIT_S seconds, test, stop
#   build  Prometheus, the tester, the demo service and Strata (cached builds are kept)
#   start  start the demo services, Strata and Prometheus, and leave them running
#   test   run the tester against the running pair; prints the score
#   test-extra  the same with extra-queries.yml (what Strata added beyond the suite)
#   test-instant  instant queries (instant-queries.txt) asked of both, answers compared
#   stop   stop what `start` started
#   restart-strata  rebuild Strata and restart it on the same data (Prometheus queues
#          its remote writes meanwhile and resends them)
# Environment:
#   WAIT_S            seconds of data to collect before `all` tests (default 5400: the suite's
#                     longest window reaches back 1 h 22 min from now)
#   QUERY_END, QUERY_RANGE_S   another query window for `test` (unix seconds, seconds), for
#                     quick checks with less data than the suite's window needs
#   STRATA_PORT       Strata's HTTP port (default 18112); PROM_PORT (default 19090)
#   CACHE             downloads, builds and run state (default ~/.cache/strata-bench)
#   COMPLIANCE_SRC, DEMO_SRC   a checkout (or a bare git directory) of the tester's and of the
#                     demo service's repository, used when the Go module proxy does not serve
#                     them (it serves tagged releases; neither repository is tagged)
set -euo pipefail

PROM_MODULE=github.com/prometheus/prometheus
PROM_VERSION=v0.305.0 # Prometheus 3.5.0 (v3 releases are published as v0.3XX.Y)
COMPLIANCE_MODULE=github.com/prometheus/compliance/promql
COMPLIANCE_REPO=https://github.com/prometheus/compliance
DEMO_MODULE=github.com/juliusv/prometheus_demo_service
DEMO_REPO=https://github.com/juliusv/prometheus_demo_service
DEMO_PORTS=(10000 10001 10002)

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${CACHE:-$HOME/.cache/strata-bench}
BIN=$CACHE/bin
RUN=$CACHE/run
WAIT_S=${WAIT_S:-5400}
STRATA_PORT=${STRATA_PORT:-18112}
PROM_PORT=${PROM_PORT:-19090}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$BIN" "$RUN" "$CACHE/src"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# A module's source as a writable copy in $CACHE/src/<name>: from the Go module proxy, else a
# git clone, else the given checkout. `go install mod@version` cannot build modules that carry
# `replace` directives, so the source is built in place instead.
module_source() {
    local name=$1 module=$2 version=$3 repo=$4 local_src=${5:-} subdir=${6:-}
    local dest=$CACHE/src/$name
    [ -d "$dest" ] && { echo "$dest"; return; }
    local dir=""
    if [ -n "$version" ]; then
        dir=$(cd "$CACHE" && go mod download -json "$module@$version" 2>/dev/null |
            sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') || true
    fi
    local tmp
    tmp=$(mktemp -d "$CACHE/src/.$name.XXXX")
    if [ -n "$dir" ] && [ -d "$dir" ]; then
        cp -r "$dir/." "$tmp/"
    elif [ -n "$local_src" ] && [ -f "$local_src/HEAD" ] && [ -d "$local_src/objects" ]; then
        # A bare git directory.
        git --git-dir="$local_src" archive HEAD ${subdir:+"$subdir"} | tar -x -C "$tmp"
        if [ -n "$subdir" ]; then
            mv "$tmp/$subdir" "$tmp.sub" && rm -rf "$tmp" && mv "$tmp.sub" "$tmp"
        fi
    elif [ -n "$local_src" ] && [ -d "$local_src" ]; then
        cp -r "$local_src/${subdir:-.}/." "$tmp/"
    elif git clone --depth 1 "$repo" "$tmp/clone" >/dev/null 2>&1; then
        cp -r "$tmp/clone/${subdir:-.}/." "$tmp/" && rm -rf "$tmp/clone"
    else
        rm -rf "$tmp"
        echo "cannot get $module: the module proxy does not serve it and $repo cannot be" \
            "cloned; set the source variable (see the header of $0)" >&2
        return 1
    fi
    chmod -R u+w "$tmp"
    mv "$tmp" "$dest"
    echo "$dest"
}

build() {
    command -v go >/dev/null || { echo "Go is needed (go 1.24 or later)" >&2; exit 1; }
    if [ ! -x "$BIN/prometheus" ]; then
        log "building Prometheus 3.5 ($PROM_MODULE@$PROM_VERSION)"
        local src
        src=$(module_source prometheus "$PROM_MODULE" "$PROM_VERSION" "" "")
        (cd "$src" && go build -o "$BIN/prometheus" ./cmd/prometheus)
    fi
    if [ ! -x "$BIN/promql-compliance-tester" ]; then
        log "building the compliance tester"
        local src
        src=$(module_source compliance "$COMPLIANCE_MODULE" "${COMPLIANCE_VERSION:-latest}" \
            "$COMPLIANCE_REPO" "${COMPLIANCE_SRC:-}" promql)
        (cd "$src" && go build -o "$BIN/promql-compliance-tester" ./cmd/promql-compliance-tester)
    fi
    if [ ! -x "$BIN/prometheus_demo_service" ]; then
        log "building the demo service"
        local src
        src=$(module_source demo "$DEMO_MODULE" "${DEMO_VERSION:-latest}" "$DEMO_REPO" \
            "${DEMO_SRC:-}" "")
        (cd "$src" && go build -o "$BIN/prometheus_demo_service" .)
    fi
    build_strata
    install_strata
}

# Replaced by a rename, so a running Strata keeps its binary.
install_strata() {
    cp "$CARGO_TARGET_DIR/release/strata" "$BIN/strata.new"
    mv -f "$BIN/strata.new" "$BIN/strata"
}

build_strata() {
    log "building Strata (release)"
    (cd "$ROOT" && STRATA_UI_SKIP_BUILD=1 cargo build --release --bin strata)
}

alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

spawn() {
    local name=$1
    shift
    alive "$name" && { log "$name already running"; return; }
    "$@" >"$RUN/$name.log" 2>&1 &
    echo $! >"$RUN/$name.pid"
}

wait_http() {
    for _ in $(seq 300); do
        curl -sf -o /dev/null "$1" && return
        sleep 0.2
    done
    echo "no answer from $1" >&2
    return 1
}

start_strata() {
    spawn strata "$BIN/strata" serve --http "127.0.0.1:$STRATA_PORT" --statsd off \
        --graphite off --data-dir "$RUN/strata-data"
    wait_http "http://127.0.0.1:$STRATA_PORT/api/v1/status/buildinfo"
}

start() {
    for port in "${DEMO_PORTS[@]}"; do
        spawn "demo-$port" "$BIN/prometheus_demo_service" -listen-address="127.0.0.1:$port"
    done
    start_strata
    # The suite's Prometheus configuration, with the demo hosts on this machine and a
    # remote_write section sending everything to Strata.
    cat >"$RUN/prometheus.yml" <<YML
global:
  scrape_interval: 5s

scrape_configs:
- job_name: 'demo'
  static_configs:
    - targets:
$(for port in "${DEMO_PORTS[@]}"; do echo "      - 'localhost:$port'"; done)

remote_write:
- url: 'http://127.0.0.1:$STRATA_PORT/api/v1/write'
YML
    spawn prometheus "$BIN/prometheus" --config.file="$RUN/prometheus.yml" \
        --storage.tsdb.path="$RUN/prometheus-data" \
        --web.listen-address="127.0.0.1:$PROM_PORT"
    wait_http "http://127.0.0.1:$PROM_PORT/-/ready"
    [ -f "$RUN/started" ] || date +%s >"$RUN/started"
    log "running since $(date -d "@$(cat "$RUN/started")" +%H:%M:%S): Prometheus :$PROM_PORT," \
        "Strata :$STRATA_PORT"
}

stop_one() {
    if alive "$1"; then
        kill -TERM "$(cat "$RUN/$1.pid")"
        for _ in $(seq 100); do alive "$1" || break; sleep 0.1; done
    fi
    rm -f "$RUN/$1.pid"
}

stop() {
    stop_one prometheus
    stop_one strata
    for port in "${DEMO_PORTS[@]}"; do stop_one "demo-$port"; done
    rm -f "$RUN/started"
}

# The suite's own queries with the demo hosts' address changed to ours. A few `should_fail`
# cases expect Prometheus 2's legacy label-name rule (`"~invalid"` as a label name fails);
# Prometheus 3.5 accepts any UTF-8 name, so the reference itself answers them and the tester
# would abort ("expected reference API query … to fail"). Each `should_fail` case the
# reference answers is turned into an ordinary comparison (Strata must then answer what
# Prometheus 3.5 answers), and listed.
prepare_queries() {
    local src=$CACHE/src/compliance
    local queries=$src/promql-test-queries.yml
    [ -n "${EXTRA:-}" ] && queries=$(dirname "$0")/extra-queries.yml
    sed 's/demo\.promlabs\.com/localhost/g' "$queries" >"$RUN/queries.src.yml"
    local end=${QUERY_END:-$(($(date +%s) - 720))}
    python3 - "$RUN/queries.src.yml" "$RUN/queries.yml" "http://127.0.0.1:$PROM_PORT" "$end" \
        "${QUERY_RANGE_S:-600}" <<'PY'
import json, re, sys, urllib.parse, urllib.request
src, dst, prom = sys.argv[1:4]
end, span = float(sys.argv[4]), float(sys.argv[5])
lines = open(src).read().split("\n")
out, query = [], None
for line in lines:
    m = re.match(r"\s*- query: (.*)$", line) or re.match(r"\s*query: (.*)$", line)
    if m:
        text = m.group(1).strip()
        if text and text[:1] in "'\"":
            q = text[0]
            text = text[1:-1].replace(q + q, q) if q == "'" else json.loads(text)
        query = text
    if re.match(r"\s*should_fail: true\s*$", line) and query and "{{" not in query:
        args = urllib.parse.urlencode(
            {"query": query, "start": end - span, "end": end, "step": 10})
        try:
            urllib.request.urlopen(prom + "/api/v1/query_range?" + args, timeout=10).read()
            print("reference answers a should_fail case; compared instead: " + query,
                  file=sys.stderr)
            line = line.replace("should_fail: true", "should_fail: false")
        except urllib.error.HTTPError:
            pass
    out.append(line)
open(dst, "w").write("\n".join(out))
PY
}

run_tester() {
    local src=$CACHE/src/compliance
    QUERY_WINDOW_END=${QUERY_END:-$(($(date +%s) - 720))}
    QUERY_END=$QUERY_WINDOW_END prepare_queries
    cat >"$RUN/targets.yml" <<YML
reference_target_config:
  query_url: 'http://127.0.0.1:$PROM_PORT'

test_target_config:
  query_url: 'http://127.0.0.1:$STRATA_PORT'
YML
    # The suite's window (ending 12 minutes ago, 10 minutes long) unless told otherwise; the
    # same one the reference was asked about above.
    printf 'query_time_parameters:\n  end_time: %s\n  range_in_seconds: %s\n' \
        "$QUERY_WINDOW_END" "${QUERY_RANGE_S:-600}" >>"$RUN/targets.yml"
    local since=$(($(date +%s) - $(cat "$RUN/started" 2>/dev/null || date +%s)))
    log "testing with $((since / 60)) minutes of data"
    (cd "$src" && "$BIN/promql-compliance-tester" -config-file="$RUN/queries.yml" \
        -config-file="$RUN/targets.yml" -query-parallelism 4 "$@") | tee "$RUN/result.txt" ||
        true
    grep '^Total:' "$RUN/result.txt" || true
}

case ${1:-all} in
build) build ;;
start) start ;;
stop) stop ;;
status)
    for n in prometheus strata "${DEMO_PORTS[@]/#/demo-}"; do
        alive "$n" && echo "$n running" || echo "$n stopped"
    done
    ;;
restart-strata)
    build_strata
    stop_one strata
    install_strata
    start_strata
    ;;
test)
    shift
    run_tester "$@"
    ;;
test-instant)
    # Instant queries (instant-queries.txt), which the tester does not ask.
    python3 "$(dirname "$0")/instant-compare.py" "$(dirname "$0")/instant-queries.txt" \
        "http://127.0.0.1:$PROM_PORT" "http://127.0.0.1:$STRATA_PORT"
    ;;
test-extra)
    # Strata's own extra queries (extra-queries.yml) instead of the suite's, same comparison.
    shift
    EXTRA=1 run_tester "$@"
    ;;
all)
    build
    # A fresh pair: no data from an earlier run on either side.
    if alive prometheus || alive strata; then
        echo "a run is still going (run.sh stop first)" >&2
        exit 1
    fi
    rm -rf "$RUN/strata-data" "$RUN/prometheus-data" "$RUN/started"
    start
    log "collecting data for $WAIT_S s"
    sleep "$WAIT_S"
    run_tester
    stop
    ;;
*)
    sed -n '2,25p' "$0"
    exit 2
    ;;
esac
