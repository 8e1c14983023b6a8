#!/usr/bin/env bash
# run.sh is `make test`: it prepares this machine (tests/host/setup.sh, as
# root, idempotently) while it compiles and vets everything, then runs every
# test in six lanes at once and prints the counts CI reads last:
#   units   every package but tests/, one package at a time, as the test user
#           (gate/'s three LAN tests once the shared and harness lanes have ended)
#   shared  the tests of tests/ that may run in parallel, four at once, the
#           slowest first, as the test user (tests/helpers_test.go says which
#           may, tests/slots_test.go which start first)
#   remote  the tests of engines that are not local (TestRemote*), as the
#           test user, each engine's one at a time, the engines side by side
#   harness the agent loops of claude, codex and opencode, the three at once,
#           as the third test user: each builds its harness image first
#           (before them, as that user, the alone tests marked "third")
#   alone   the tests of tests/ that must be alone on one uid (tests/alone),
#           one at a time, as the second test user (those marked "last"
#           after the others and after gate/)
# Under AISB_INTEGRATION=1 a test that cannot run fails instead of skipping.
# Each phase says how long it took; the go test -json streams stay in
# $AISB_TEST_OUT (default test-out/) for a closer look.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TAGS:?TAGS: the build tags (the Makefile passes its own)}"
GO=${GO:-go}
export CGO_ENABLED=0
out=${AISB_TEST_OUT:-test-out}
rm -rf "$out"
mkdir -p "$out"

start=$(date +%s)
phase_start=$start
phase() {
	local now
	now=$(date +%s)
	printf 'test: %s: %d s (%d s in all)\n' "$1" $((now - phase_start)) $((now - start))
	phase_start=$now
}

# The tests that must be alone on one uid, as -run patterns: all of them,
# and those to run after the others.
pattern() { awk -v want="$1" 'NF && $1 !~ /^#/ && (want == "" || $2 == want) {printf "%s%s", sep, $1; sep="|"}' tests/alone; }
alone="^($(pattern ""))\$"
last="^($(pattern last))\$"
third="^($(pattern third))\$"
# The agent loops whose harness image no other test builds. Each builds its
# image first, 1-2.5 minutes from nothing (npm's install of the package, the
# commit of its layer, the copy Podman makes for the sandbox's user ids;
# npm's download is seconds of it), then runs its loop in 16-31 s. In the
# shared lane they would hold three of its slots, and gate/ waits for that
# lane; in a lane of their own beside it they end minutes before it does.
# They run as a third test user: the builds' commits and copies hold the
# locks of the user's Podman storage, and beside them in one storage the
# escape battery took 93 s instead of 42 (and once left its containers
# over 5 s); with a storage of their own, 49 s.
# pi's loop (TestCredentialsPiHarness) is in the alone lane.
harness='^TestHarnessLoop(Claude|Codex|Opencode)$'
# The tests of engines that are not local (tests/remote*_test.go).
remote='^TestRemote'

# 1. The host and the build at once: setup.sh mostly waits on apt and
#    debootstrap, the compiler on the CPU. Beside the host's build, the
#    builds for the machines users have are type-checked, the linux/arm64
#    programs linked (tests/cross.sh check), and the CLI built for each of
#    darwin/arm64, darwin/amd64 and linux/arm64 (tests/cross.sh cli).
AISB_SETUP_USER3_IMAGE=later bash tests/host/setup.sh >"$out/setup.log" 2>&1 &
setup=$!
build_ok=1
TAGS="$TAGS" GO="$GO" bash tests/cross.sh check >"$out/cross.log" 2>&1 &
cross=$!
# The CLI built for the other machines: on a warm build cache seconds, on an
# empty one minutes of CPU, so it runs beside everything at the lowest
# priority and is waited for once the lanes have ended.
TAGS="$TAGS" GO="$GO" nice -n 19 bash tests/cross.sh cli >"$out/cross-cli.log" 2>&1 &
cross_cli=$!
{
	$GO build -o "$out/gotest" ./tests/gotest &&
		$GO vet -tags "$TAGS" ./... &&
		AISB_INTEGRATION=0 $GO test -tags "$TAGS" -count=1 -run '^$' ./... >/dev/null &&
		$GO build -tags "$TAGS" ./cmd/... ./tests/probe ./tests/racecreate ./bench/probe &&
		AISB_INTEGRATION=0 $GO test -tags "$TAGS" -list "$alone" ./tests | grep '^Test' | sort >"$out/alone.found" &&
		pattern "" | tr '|' '\n' | sort | diff - "$out/alone.found"
} >"$out/build.log" 2>&1 || build_ok=0
printf "test: the host's build and vet ended after %d s\n" $(($(date +%s) - phase_start))
if ! wait "$cross"; then
	build_ok=0
	cat "$out/cross.log" >>"$out/build.log"
fi
phase "build and vet"
setup_ok=1
wait "$setup" || setup_ok=0
phase "host set-up (beside the build)"
if [ "$build_ok" = 0 ]; then
	cat "$out/build.log" >&2
	echo "test: the build or vet failed (here or for another machine: tests/cross.sh), or tests/alone names a test that does not exist" >&2
	exit 1
fi
if [ "$setup_ok" = 0 ]; then
	cat "$out/setup.log" >&2
	echo "test: tests/host/setup.sh failed" >&2
	exit 1
fi

# 2. The lanes at once.
. tests/host/env.sh
# gate/'s three LAN tests (newLAN, gate/lan_test.go) put a network of their own
# on-link, which changes the host's addresses that every running gate
# follows (squid reconfigures): they run once the parallel tests have ended
# (and still end before the alone lane). The rest of gate/ runs in the units
# lane. (Twice gate/ beside the escape battery saw the battery's last
# session's containers outlive its 5 s; the battery waits 15 s now.)
gate=$($GO list ./gate/...)
lan='^(TestSpecialRangesRefused|TestGateFollowsOnLinkPrefixes|TestWildcardResolvesAnyLabel)$'
units=$($GO list ./... | grep -v '/tests$')
export AISB_INTEGRATION=1
lane() {
	local name=$1
	shift
	# The lane's exit status is go test's; gotest only copies and tells.
	set +e
	"$@" 2>&1 | "$out/gotest" follow "$name" >"$out/$name.json"
	local rc=${PIPESTATUS[0]}
	set -e
	printf 'test: lane %s ended (go test exit %d) after %d s\n' "$name" "$rc" $(($(date +%s) - phase_start))
	return "$rc"
}
go_test=($GO test -tags "$TAGS" -count=1 -json -timeout 30m)
# shellcheck disable=SC2086 # $units is a list of packages
lane units "${go_test[@]}" -p 1 -skip "$lan" $units &
units_pid=$!
# The shared lane's four slots are tests/slots_test.go's (AISB_TEST_SLOTS):
# it starts the slowest tests first, so go test's own limit admits them all.
# Three kept it slot-bound (1,500 s of the tests' own time in 506 s, with
# the harness lane and the remote tests added) on a machine not busy all
# along; four too once the remote lane's image builds ran beside it (2,131 s
# of the tests' own time, the lane's end at 539 s), and five were slower
# still there (573 s: more at once on 2 cores).
AISB_TEST_SLOTS=4 lane shared "${go_test[@]}" -parallel 100 -skip "$alone|$harness|$remote" ./tests &
shared_pid=$!
# The remote engines' tests in a lane of their own, as the same test user:
# each engine user's tests run one at a time (lockEngine), the unix:// and
# ssh:// chains side by side (minutes each: their images built on the
# engine, the pi image copied to the ssh:// one). In the shared lane a
# test waiting for its engine held a slot, and the chains held one each
# for minutes (the lane ended at 624 s).
lane remote "${go_test[@]}" -parallel 8 -run "$remote" ./tests &
remote_pid=$!
# Its user's base image is imported here, not in step 1, where it would
# lengthen the set-up beside the build (its lane has minutes to spare).
# First the alone tests marked "third" run as that user, one at a time, then
# the harness lane: its image builds then also overlap less with every
# user's first builds.
harness_lane() {
	if ! bash tests/host/setup.sh base-image "$AISB_TEST_USER3" >"$out/setup-harness.log" 2>&1; then
		cat "$out/setup-harness.log" >&2
		echo "test: the base image for $AISB_TEST_USER3 (the harness lane) failed" >&2
		return 1
	fi
	local rc=0
	AISB_TEST_USER=$AISB_TEST_USER3 lane alone-third "${go_test[@]}" -run "$third" ./tests || rc=1
	AISB_TEST_USER=$AISB_TEST_USER3 lane harness "${go_test[@]}" -parallel 3 -run "$harness" ./tests || rc=1
	return "$rc"
}
harness_lane &
harness_pid=$!
AISB_TEST_USER=$AISB_TEST_USER2 lane alone "${go_test[@]}" -run "$alone" -skip "$last|$third" ./tests &
alone_pid=$!
rc=0
wait "$units_pid" || rc=1
wait "$shared_pid" || rc=1
wait "$remote_pid" || rc=1
# The harness lane's sessions are another user's, but gate/'s LAN test
# changes the host's addresses, which every running gate follows.
wait "$harness_pid" || rc=1
# shellcheck disable=SC2086 # $gate is a list of packages
lane gate "${go_test[@]}" -p 1 -run "$lan" $gate || rc=1
wait "$alone_pid" || rc=1
# The alone lane's last tests run once gate/ has ended: its LAN test
# changes the host's addresses, and every running gate then reconfigures
# (squid reopens its ports), which refused two of TestSessionsAtOnce's
# first requests once.
AISB_TEST_USER=$AISB_TEST_USER2 lane alone-last "${go_test[@]}" -run "$last" ./tests || rc=1
phase "tests"
if ! wait "$cross_cli"; then
	cat "$out/cross-cli.log" >&2
	echo "test: the CLI's build for another machine failed (tests/cross.sh cli)" >&2
	rc=1
fi
phase "the CLI's builds for the other machines (beside everything)"

# 3. The budget, then what failed or skipped and the counts, last. From
#    nothing (set-up included) on the 2-core machine kind CI runs on, the
#    whole command must end within AISB_TEST_BUDGET seconds (600). A run
#    over it fails even when every test passed: the suite's time is guarded
#    like its results, so a slow test is found the day it lands.
budget=${AISB_TEST_BUDGET:-600}
took=$(($(date +%s) - start))
if [ "$took" -gt "$budget" ]; then
	printf 'test: %d s in all, over the budget of %d s (AISB_TEST_BUDGET): the phases above say where the time went\n' "$took" "$budget" >&2
	rc=1
else
	printf 'test: %d s in all, within the budget of %d s\n' "$took" "$budget"
fi
"$out/gotest" summary "$out"/*.json || rc=1
exit "$rc"
