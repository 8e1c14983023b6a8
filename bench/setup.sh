#!/usr/bin/env bash
# setup.sh prepares what `make bench` measures aisb against, beside what
# tests/host/setup.sh prepares: the peer sandbox sandbox-runtime (`srt`, the
# npm package @anthropic-ai/sandbox-runtime, pinned) with the tools it needs
# on Linux (bubblewrap, socat, ripgrep). Idempotent: a second run on a
# prepared machine checks and returns; the npm install is cached by version.
set -euo pipefail

SRT_PACKAGE=@anthropic-ai/sandbox-runtime
SRT_VERSION=0.0.83
# Where the pinned srt lives; the benchmarks read the same path (bench/srt.go).
SRT_DIR=${AISB_BENCH_SRT_DIR:-/var/cache/aisb-bench/srt-$SRT_VERSION}

log() { printf 'bench setup: %s\n' "$*" >&2; }
die() { printf 'bench setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages)"

need=()
for c in bwrap socat rg; do
	command -v "$c" >/dev/null 2>&1 || need+=("$c")
done
if [ ${#need[@]} -gt 0 ]; then
	log "installing bubblewrap, socat, ripgrep (missing: ${need[*]})"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends bubblewrap socat ripgrep >/dev/null
fi

command -v npm >/dev/null 2>&1 || die "npm is not installed (srt is an npm package); install nodejs and npm"
bin="$SRT_DIR/node_modules/.bin/srt"
have=$(node -p "require('$SRT_DIR/node_modules/$SRT_PACKAGE/package.json').version" 2>/dev/null || true)
if [ "$have" != "$SRT_VERSION" ] || [ ! -x "$bin" ]; then
	log "installing $SRT_PACKAGE@$SRT_VERSION into $SRT_DIR"
	rm -rf "$SRT_DIR.tmp"
	mkdir -p "$SRT_DIR.tmp"
	npm install --prefix "$SRT_DIR.tmp" --no-audit --no-fund --loglevel=error "$SRT_PACKAGE@$SRT_VERSION" >&2
	rm -rf "$SRT_DIR"
	mv "$SRT_DIR.tmp" "$SRT_DIR"
fi
# The benchmarks run srt as the unprivileged test user.
chmod -R a+rX "$(dirname "$SRT_DIR")"
"$bin" --version >/dev/null 2>&1 || die "$bin does not run"
log "srt $("$bin" --version 2>/dev/null) at $bin"
