#!/bin/sh
# Installs the Strata agent from a Strata core, in one step:
#
#   curl -fsSL http://core:8112/install.sh | sudo sh -s -- --core http://core:8112 --token-file F
#
# Downloads the `strata` binary the core runs, checks it against the SHA-256 the core publishes,
# and runs `strata install agent` with every argument given here. The token is read from the
# file named by --token-file by `strata` itself: it never appears in a process list or in the
# environment. Running it again changes nothing.
set -eu

core=""
prev=""
for arg in "$@"; do
    case "$prev" in
        --core) core="$arg" ;;
    esac
    case "$arg" in
        --core=*) core="${arg#--core=}" ;;
        -h | --help)
            echo "usage: install.sh --core URL [--token-file F] [strata install agent options]"
            exit 0
            ;;
    esac
    prev="$arg"
done
if [ -z "$core" ]; then
    echo "install.sh: --core URL is required (the core this script came from)" >&2
    exit 2
fi
core="${core%/}"

fetch() {
    # $1: URL, $2: output file.
    if command -v curl >/dev/null 2>&1; then
        curl -fsS -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$2" "$1"
    else
        echo "install.sh: neither curl nor wget is installed" >&2
        return 1
    fi
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT INT TERM

fetch "$core/download/strata" "$tmp/strata" || {
    echo "install.sh: could not download $core/download/strata" >&2
    exit 1
}
fetch "$core/download/strata.sha256" "$tmp/strata.sha256" || {
    echo "install.sh: could not download $core/download/strata.sha256" >&2
    exit 1
}
want="$(cut -d ' ' -f 1 <"$tmp/strata.sha256")"
got="$(sha256sum "$tmp/strata" | cut -d ' ' -f 1)"
if [ "$want" != "$got" ]; then
    echo "install.sh: the downloaded binary's SHA-256 is $got, the core publishes $want" >&2
    exit 1
fi
chmod 0755 "$tmp/strata"
"$tmp/strata" install agent "$@"
