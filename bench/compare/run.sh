#!/usr/bin/env bash
# Strata, VictoriaMetrics and Prometheus side by side: builds the peers at pinned versions from
# the Go module proxy (cached in $CACHE), builds Strata and serve-load, and runs compare.py over
# the workloads given (all by default). README.md says what is measured and how.
#
#   bench/compare/run.sh [--rounds 3] [--connections 4] [WORKLOAD ...]
#   bench/compare/run.sh million        # one million series, 30 minutes of data (million.py)
#
# Environment: CACHE (default ~/.cache/strata-bench), CARGO_TARGET_DIR (default target/).
set -euo pipefail

PROM_MODULE=github.com/prometheus/prometheus
PROM_VERSION=v0.305.0 # Prometheus 3.5.0 (v3 releases are published as v0.3XX.Y)
VM_MODULE=github.com/VictoriaMetrics/VictoriaMetrics
VM_VERSION=v1.110.0

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${CACHE:-$HOME/.cache/strata-bench}
BIN=$CACHE/bin
export CACHE
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$BIN" "$CACHE/src"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# A module's source as a writable copy in $CACHE/src/<name>: modules with `replace`
# directives refuse `go install mod@version`, so each is built inside a copy of its source.
module_source() {
    local name=$1 module=$2 version=$3
    local dest=$CACHE/src/$name
    [ -d "$dest" ] && { echo "$dest"; return; }
    local dir
    dir=$(cd "$CACHE" && go mod download -json "$module@$version" |
        sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || { echo "go mod download $module@$version failed" >&2; return 1; }
    local tmp
    tmp=$(mktemp -d "$CACHE/src/.$name.XXXX")
    cp -r "$dir/." "$tmp/"
    chmod -R u+w "$tmp"
    mv "$tmp" "$dest"
    echo "$dest"
}

build_peers() {
    command -v go >/dev/null || { echo "Go is needed (1.24 or later)" >&2; exit 1; }
    if [ ! -x "$BIN/prometheus" ]; then
        log "building Prometheus 3.5 ($PROM_MODULE@$PROM_VERSION)"
        local src
        src=$(module_source prometheus "$PROM_MODULE" "$PROM_VERSION")
        (cd "$src" && go build -o "$BIN/prometheus" ./cmd/prometheus)
    fi
    if [ ! -x "$BIN/victoria-metrics-$VM_VERSION" ]; then
        log "building VictoriaMetrics $VM_VERSION"
        local src
        src=$(module_source "victoria-metrics-$VM_VERSION" "$VM_MODULE" "$VM_VERSION")
        # The module's copy of vendor/ is partial (no module zip carries it): the dependencies
        # come from the module proxy instead; pure Go, as VictoriaMetrics' release builds.
        rm -rf "$src/vendor"
        (cd "$src" && CGO_ENABLED=0 go build -mod=mod -o "$BIN/victoria-metrics-$VM_VERSION" \
            ./app/victoria-metrics)
    fi
}

build_strata() {
    log "building strata and serve-load"
    # Two builds: `--bin strata` would apply to serve-load's package too and build none of it.
    (cd "$ROOT" && STRATA_UI_SKIP_BUILD=1 cargo build --release -p server --bin strata &&
        cargo build --release -p serve-load)
}

build_peers
build_strata
commit=$(cd "$ROOT" && git rev-parse --short=8 HEAD)
if [ "${1:-}" = million ]; then
    shift
    exec python3 "$ROOT/bench/compare/million.py" --strata "$CARGO_TARGET_DIR/release/strata" \
        --serve-load "$CARGO_TARGET_DIR/release/serve-load" \
        --victoriametrics "$BIN/victoria-metrics-$VM_VERSION" --prometheus "$BIN/prometheus" \
        --commit "$commit" "$@"
fi
exec python3 "$ROOT/bench/compare/compare.py" --strata "$CARGO_TARGET_DIR/release/strata" \
    --serve-load "$CARGO_TARGET_DIR/release/serve-load" \
    --victoriametrics "$BIN/victoria-metrics-$VM_VERSION" --prometheus "$BIN/prometheus" \
    --commit "$commit" "$@"
