#!/usr/bin/env bash
# The browser the console's tests drive: Debian's chromium and chromium-driver (the driver matches the browser's
# version exactly, so nothing is downloaded at test time). Prints the two paths, one per line, when both are there;
# installs them with apt-get when run as root on Debian and they are missing (a progress line, then apt's errors
# only); otherwise says how to install them and exits 1.
#
#   deploy/local/browser.sh            ensure, then print the paths
#   deploy/local/browser.sh --check    print the paths, or exit 1 (never installs)
#
# GK_CHROMIUM / GK_CHROMEDRIVER name other binaries (the tests read the same variables).
set -euo pipefail

log() { echo "browser: $*" >&2; }
die() { log "$*"; exit 1; }

find_both() {
    chromium="${GK_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
    driver="${GK_CHROMEDRIVER:-$(command -v chromedriver || true)}"
    [[ -n "$chromium" && -x "$chromium" && -n "$driver" && -x "$driver" ]]
}

if find_both; then
    printf '%s\n%s\n' "$chromium" "$driver"
    exit 0
fi
[[ "${1:-}" == "--check" ]] && die "chromium and chromedriver are missing (Debian: apt-get install -y chromium chromium-driver)"
[[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null ||
    die "the console's tests need chromium and chromedriver: install them (Debian: apt-get install -y chromium chromium-driver), or name them with GK_CHROMIUM and GK_CHROMEDRIVER"
log "installing chromium and chromium-driver with apt-get (about 1-2 minutes, once)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || die "apt-get update failed"
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null || die "apt-get install chromium chromium-driver failed"
find_both || die "chromium or chromedriver is still missing after the install"
printf '%s\n%s\n' "$chromium" "$driver"
