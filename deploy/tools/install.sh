#!/usr/bin/env bash
# The operator kit's test tools, built from source at pinned versions and cached between runs and checkouts:
#
#   deploy/tools/install.sh [TOOL ...]     (no TOOL: all of them)   prints nothing but errors; exits non-zero on any
#   deploy/tools/install.sh --path          prints the folder the tools are in (put it first on PATH)
#
#   helm        helm.sh/helm/v3/cmd/helm                         (chart lint and template)
#   promtool    github.com/prometheus/prometheus/cmd/promtool    (rule checks and rule unit tests)
#   prometheus  github.com/prometheus/prometheus/cmd/prometheus  (evaluates every dashboard and rule query)
#   kubevalidate  deploy/tools/kubevalidate, this repository's strict decoder of rendered manifests
#
# Go tools come from the Go module proxy (`go install MODULE@VERSION`); a binary is rebuilt only when its pinned
# version changes (a stamp file beside it). Variables:
#   GK_CACHE_DIR   the cache shared by checkouts (default ~/.cache/rogerwilco-gatekeeper): tools in tools/bin
#   GO             the go command (default: go on PATH)
set -euo pipefail

HELM_VERSION=v3.22.0
PROMETHEUS_VERSION=v0.316.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${GK_CACHE_DIR:-${HOME:-/root}/.cache/rogerwilco-gatekeeper}"
BIN="$CACHE_DIR/tools/bin"
GO="${GO:-go}"

die() {
    echo "deploy/tools/install.sh: $*" >&2
    exit 1
}

# go_tool NAME MODULE_PATH VERSION: GOBIN=$BIN go install MODULE_PATH@VERSION, unless the stamp says it is there.
go_tool() {
    local name=$1 module=$2 version=$3 stamp="$BIN/.$1.version"
    if [[ -x "$BIN/$name" && "$(cat "$stamp" 2>/dev/null)" == "$module@$version" ]]; then
        return 0
    fi
    command -v "$GO" >/dev/null || die "$name needs Go (go install $module@$version); install Go 1.26 or newer"
    mkdir -p "$BIN"
    echo "deploy/tools/install.sh: building $name ($module@$version), once" >&2
    GOBIN="$BIN" GOFLAGS="${GOFLAGS:--trimpath}" CGO_ENABLED=0 "$GO" install "$module@$version" >&2 ||
        die "go install $module@$version failed"
    echo "$module@$version" >"$stamp"
}

# local_tool NAME DIR: builds the Go program in DIR (this repository's), when its sources changed.
local_tool() {
    local name=$1 dir=$2 stamp="$BIN/.$1.version" sum
    [[ -f "$dir/go.mod" ]] || die "$dir/go.mod is missing"
    sum="$(cat "$dir"/go.mod "$dir"/go.sum "$dir"/*.go 2>/dev/null | sha256sum | cut -c1-16)"
    if [[ -x "$BIN/$name" && "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
        return 0
    fi
    command -v "$GO" >/dev/null || die "$name needs Go; install Go 1.26 or newer"
    mkdir -p "$BIN"
    echo "deploy/tools/install.sh: building $name from $dir" >&2
    (cd "$dir" && CGO_ENABLED=0 "$GO" build -trimpath -o "$BIN/$name" .) >&2 || die "building $name failed"
    echo "$sum" >"$stamp"
}

install_one() {
    case "$1" in
    helm) go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" ;;
    promtool) go_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_VERSION" ;;
    prometheus) go_tool prometheus github.com/prometheus/prometheus/cmd/prometheus "$PROMETHEUS_VERSION" ;;
    kubevalidate) local_tool kubevalidate "$HERE/kubevalidate" ;;
    *) die "unknown tool $1 (helm, promtool, prometheus, kubevalidate)" ;;
    esac
}

if [[ "${1:-}" == "--path" ]]; then
    echo "$BIN"
    exit 0
fi
tools=("$@")
((${#tools[@]})) || tools=(helm promtool prometheus kubevalidate)
for t in "${tools[@]}"; do
    install_one "$t"
done
