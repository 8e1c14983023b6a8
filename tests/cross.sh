#!/usr/bin/env bash
# cross.sh builds or checks aisb for the machines users have, beside the
# host's own build (make's bin/aisb, bin/aisb-entrypoint, bin/aisb-gatehelper):
#   the CLI         for darwin/arm64, darwin/amd64 and linux/arm64
#   the entrypoint  for linux/amd64 and linux/arm64: the engine's machine,
#   the gate helper which the CLI finds in bin/linux-ARCH/ (internal/progs)
#
#   cross.sh build DIR  writes DIR/OS-ARCH/aisb and DIR/linux-ARCH/aisb-{entrypoint,gatehelper}
#   cross.sh vet        go vet, for each CLI target, of the module's packages
#                       its programs import (their tests too)
#   cross.sh check      what make test runs (tests/run.sh's build phase), cheap:
#                       tests/crosscheck type-checks vet's packages for each
#                       target from source (no code generated: a cold cross
#                       vet of the CLI's graph costs minutes of CPU per
#                       target), and the linux/arm64 entrypoint and gate
#                       helper are built and linked, nothing written.
#   cross.sh cli        the CLI built and linked for each target, nothing
#                       written (make test runs it beside everything else).
# The programs are static (CGO_ENABLED=0): they run first in any image.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TAGS:?TAGS: the build tags (the Makefile passes its own)}"
GO=${GO:-go}
export CGO_ENABLED=0

clis=(darwin/arm64 darwin/amd64 linux/arm64)
engines=(amd64 arm64)
mod=$($GO list -m)

# graph OS ARCH PKG...: the module's packages PKG... import, for OS/ARCH.
graph() {
	local os=$1 arch=$2
	shift 2
	GOOS=$os GOARCH=$arch $GO list -tags "$TAGS" -deps "$@" | grep -E "^$mod(/|\$)"
}

# each CMD...: CMD OS ARCH PKG... for each CLI target with its programs:
# the entrypoint and the helper are Linux programs (linux/amd64's are the
# host's, which make vet and the suite's own vet cover).
each() {
	local t progs
	for t in "${clis[@]}"; do
		progs=(./cmd/aisb)
		[ "${t%/*}" = linux ] && progs+=(./cmd/aisb-entrypoint ./cmd/aisb-gatehelper)
		"$@" "${t%/*}" "${t#*/}" "${progs[@]}"
	done
}

vet_graph() {
	local os=$1 arch=$2
	shift 2
	# shellcheck disable=SC2046 # a list of packages
	GOOS=$os GOARCH=$arch $GO vet -tags "$TAGS" $(graph "$os" "$arch" "$@")
}

typecheck_graph() {
	local os=$1 arch=$2
	shift 2
	# shellcheck disable=SC2046 # a list of packages
	GOOS=$os GOARCH=$arch "$tmp/crosscheck" -tags "$TAGS" -test $(graph "$os" "$arch" "$@")
}

case ${1:-} in
build)
	out=${2:?cross.sh build DIR}
	for t in "${clis[@]}"; do
		GOOS=${t%/*} GOARCH=${t#*/} $GO build -tags "$TAGS" -o "$out/${t/\//-}/aisb" ./cmd/aisb
	done
	for a in "${engines[@]}"; do
		for p in aisb-entrypoint aisb-gatehelper; do
			GOOS=linux GOARCH=$a $GO build -trimpath -ldflags "-s -w" -o "$out/linux-$a/$p" "./cmd/$p"
		done
	done
	;;
vet)
	each vet_graph
	;;
check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	$GO build -o "$tmp/crosscheck" ./tests/crosscheck
	each typecheck_graph
	# Linked (what runs in the engine's containers), then discarded.
	GOOS=linux GOARCH=arm64 $GO build -trimpath -ldflags "-s -w" -o "$tmp" ./cmd/aisb-entrypoint ./cmd/aisb-gatehelper
	;;
cli)
	# Each of the CLI's targets built and linked, then discarded (issue
	# #29: `GOOS=darwin GOARCH=arm64 go build ./cmd/aisb` runs in CI). From
	# an empty build cache a minute of a 2-core VM each, 2 s from a warm
	# one. -trimpath keeps the checkout's path out of the cache's keys, so
	# a clone elsewhere (CI's) compiles only the packages that changed.
	for t in "${clis[@]}"; do
		GOOS=${t%/*} GOARCH=${t#*/} $GO build -trimpath -tags "$TAGS" -o /dev/null ./cmd/aisb
	done
	;;
*)
	echo "usage: cross.sh build DIR | vet | check | cli" >&2
	exit 2
	;;
esac
