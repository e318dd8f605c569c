#!/usr/bin/env bash
# The operator kit's test tools, built from pinned sources once and cached by version between runs and checkouts:
#
#   deploy/tools/install.sh [TOOL ...]     (no TOOL: all of them)   prints one progress line per build, and errors
#   deploy/tools/install.sh --path          prints the folder the tools are in (put it first on PATH)
#
#   helm        helm.sh/helm/v4/cmd/helm                         (chart lint and template)
#   promtool    github.com/prometheus/prometheus/cmd/promtool    (rule checks and rule unit tests)
#   prometheus  github.com/prometheus/prometheus/cmd/prometheus  (a live server: parses and evaluates every
#                                                                 dashboard and rule query in tests/deploy)
#   kubevalidate  deploy/tools/kubevalidate, this repository's strict decoder of rendered manifests
#
# Each tool is built into its own folder named by its version, TOOLS/NAME-VERSION/ (kubevalidate: a hash of its
# sources), and only when that folder is missing; promtool and prometheus come from one `go install` (one module,
# one version, so their shared packages compile once). The folder --path prints holds links to the pinned versions.
# A build runs at nice 19 with a Go module cache, build cache and GOPATH of its own in a temporary folder that is
# deleted afterwards, so no Go cache is left behind (the cached tools take about 390 MB); go's output goes to a log
# that is printed (its tail) on failure and kept beside the tools.
#
# Variables:
#   GK_CACHE_DIR   the cache shared by checkouts (default ~/.cache/rogerwilco-gatekeeper): the tools in tools/
#   GO             the go command (default: go on PATH); GOPROXY, GONOSUMDB... are go's own, passed through
set -euo pipefail

HELM_VERSION=v4.3.2
PROMETHEUS_VERSION=v0.316.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${GK_CACHE_DIR:-${HOME:-/root}/.cache/rogerwilco-gatekeeper}"
TOOLS="$CACHE_DIR/tools"
LINKS="$TOOLS/current"
GO="${GO:-go}"

die() {
    echo "tools: $*" >&2
    exit 1
}

# build LABEL DEST MINUTES COMMAND...: runs the go COMMAND (which writes its binaries into $OUT) with private caches in
# a temporary folder, checks that each binary runs, then moves $OUT to DEST, the tool's versioned folder, and deletes
# the rest. Prints one line before and one after.
build() {
    local name=$1 dest=$2 minutes=$3 started rc=0 bin
    shift 3
    command -v "$GO" >/dev/null || die "$name is built from source and needs Go 1.26 or newer on the PATH (or GO=...)"
    mkdir -p "$TOOLS/logs"
    local work log="$TOOLS/logs/$(basename "$dest").log"
    work="$(mktemp -d "$TOOLS/.build.XXXXXX")"
    # shellcheck disable=SC2064  # expand $work now: the traps outlive this function's locals
    trap "rm -rf '$work'" EXIT
    # shellcheck disable=SC2064
    trap "rm -rf '$work'; exit 130" INT TERM HUP
    echo "tools: building $name (about $minutes minutes, once)" >&2
    started=$SECONDS
    OUT="$work/out" GOPATH="$work/gopath" GOMODCACHE="$work/mod" GOCACHE="$work/cache" \
        GOFLAGS="-trimpath -modcacherw -buildvcs=false" CGO_ENABLED=0 "$@" >"$log" 2>&1 || rc=$?
    if ((rc == 0)); then
        for bin in "$work/out"/*; do
            "$bin" --help >/dev/null 2>&1 || "$bin" -h >/dev/null 2>&1 || "$bin" help >/dev/null 2>&1 ||
                { echo "$bin does not run" >>"$log" && rc=1; }
        done
    fi
    if ((rc != 0)); then
        tail -n 30 "$log" >&2
        rm -rf "$work"
        trap - EXIT INT TERM HUP
        die "building $name failed (exit $rc); the full log is $log"
    fi
    rm -rf "$dest"
    mv "$work/out" "$dest"
    rm -rf "$work"
    trap - EXIT INT TERM HUP
    echo "tools: $name built in $(((SECONDS - started) / 60))m$(((SECONDS - started) % 60))s ($(du -sh "$dest" | cut -f1))" >&2
}

# go_tool NAME VERSION MINUTES LABEL PACKAGE...: `go install PACKAGE@VERSION...` into TOOLS/NAME-VERSION, unless it
# is there.
go_tool() {
    local name=$1 version=$2 minutes=$3 label="$4 $2" dest="$TOOLS/$1-$2"
    shift 4
    [[ -d "$dest" ]] && return 0
    local args=() pkg
    for pkg in "$@"; do args+=("$pkg@$version"); done
    # shellcheck disable=SC2016  # $OUT is build()'s, expanded in the inner shell
    build "$label" "$dest" "$minutes" nice -n 19 bash -c 'GOBIN="$OUT" exec "$0" install "$@"' "$GO" "${args[@]}"
}

# sources_sum DIR: the version of this repository's Go program in DIR, a hash of its go.mod, go.sum and .go files.
sources_sum() {
    [[ -f "$1/go.mod" ]] || die "$1/go.mod is missing"
    cat "$1"/go.mod "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-16
}

# local_tool NAME DIR MINUTES: builds the Go program in DIR into TOOLS/NAME-SUM (sources_sum), unless it is there.
local_tool() {
    local name=$1 dir=$2 minutes=$3 sum
    sum="$(sources_sum "$dir")"
    local dest="$TOOLS/$name-$sum"
    [[ -d "$dest" ]] && return 0
    # shellcheck disable=SC2016  # $OUT is build()'s, expanded in the inner shell
    build "$name $sum" "$dest" "$minutes" nice -n 19 bash -c 'cd "$1" && exec "$0" build -o "$OUT/$2" .' "$GO" "$dir" "$name"
}

# install_one NAME: builds what NAME needs, then points LINKS/NAME at it (a new link renamed over the old one).
install_one() {
    local target
    case "$1" in
    helm)
        go_tool helm "$HELM_VERSION" 3 helm helm.sh/helm/v4/cmd/helm
        target="$TOOLS/helm-$HELM_VERSION/helm"
        ;;
    promtool | prometheus)
        go_tool prometheus "$PROMETHEUS_VERSION" 8 "promtool and prometheus" \
            github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus
        target="$TOOLS/prometheus-$PROMETHEUS_VERSION/$1"
        ;;
    kubevalidate)
        local_tool kubevalidate "$HERE/kubevalidate" 2
        target="$TOOLS/kubevalidate-$(sources_sum "$HERE/kubevalidate")/kubevalidate"
        ;;
    *) die "unknown tool $1 (helm, promtool, prometheus, kubevalidate)" ;;
    esac
    [[ -x "$target" ]] || die "$target is missing after its build"
    if [[ "$(readlink "$LINKS/$1" 2>/dev/null)" != "$target" ]]; then
        mkdir -p "$LINKS"
        ln -sfn "$target" "$LINKS/.$1.new"
        mv -fT "$LINKS/.$1.new" "$LINKS/$1"
    fi
}

if [[ "${1:-}" == "--path" ]]; then
    echo "$LINKS"
    exit 0
fi
tools=("$@")
((${#tools[@]})) || tools=(helm promtool prometheus kubevalidate)
mkdir -p "$TOOLS"
# one install at a time on this cache (two checkouts' tests, or make tools and a test's fixture)
exec 9>"$TOOLS/.lock"
flock 9
rm -rf "$TOOLS"/.build.* # what a build that was killed left behind (none runs: this holds the lock)
# the layout before versioned folders: tools/bin with a .NAME.version stamp beside each binary
[[ -f "$TOOLS/bin/.helm.version" ]] && rm -rf "$TOOLS/bin"
for t in "${tools[@]}"; do
    install_one "$t"
done
