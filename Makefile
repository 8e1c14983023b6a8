# The podman bindings build without cgo only with these tags; every go build,
# vet and test of aisb uses them. `go install` needs them too (see README).
TAGS := remote exclude_graphdriver_btrfs containers_image_openpgp
GO ?= go
SHELL := /bin/bash
export CGO_ENABLED := 0

.PHONY: all build vet vet-cross test test-unit test-harness host clean bench stress

all: build

# The host's three, then the machines users have (tests/cross.sh): the CLI
# in bin/darwin-arm64/, bin/darwin-amd64/ and bin/linux-arm64/, and the
# entrypoint and gate helper for the engine's machine in bin/linux-amd64/
# and bin/linux-arm64/, where aisb finds them (internal/progs).
build:
	$(GO) build -tags "$(TAGS)" -o bin/aisb ./cmd/aisb
	$(GO) build -trimpath -ldflags "-s -w" -o bin/aisb-entrypoint ./cmd/aisb-entrypoint
	$(GO) build -trimpath -ldflags "-s -w" -o bin/aisb-gatehelper ./cmd/aisb-gatehelper
	TAGS="$(TAGS)" GO="$(GO)" bash tests/cross.sh build bin

vet:
	$(GO) vet -tags "$(TAGS)" ./...

# Vets every cross target's import graph (make test runs it, with the
# builds the issue names linked: tests/cross.sh check).
vet-cross:
	TAGS="$(TAGS)" GO="$(GO)" bash tests/cross.sh vet

# Unit tests only: no containers, even as root on a prepared host
# (AISB_INTEGRATION=0); integration tests skip with a reason.
test-unit:
	AISB_INTEGRATION=0 $(GO) test -tags "$(TAGS)" ./...

# The README's test command: prepare this machine (as root, idempotently)
# while compiling and vetting, then run every test, integration ones
# included, in three lanes at once (tests/run.sh says which), and print
# "N passed, N failed" last. Under AISB_INTEGRATION=1 a test that cannot
# run fails instead of skipping.
test:
	TAGS="$(TAGS)" GO="$(GO)" bash tests/run.sh

# Just the agent loops of claude, codex and opencode (tests/harness_test.go),
# which make test runs too: each harness image built (from nothing on a new
# test user: 1-3 minutes), then a real loop through the gate with and
# without the proxy variables.
test-harness: host
	AISB_INTEGRATION=1 $(GO) test -tags "$(TAGS)" -count=1 -parallel 3 -run '^TestHarnessLoop(Claude|Codex|Opencode)$$' -timeout 20m -v ./tests

# What tests Podman rather than aisb (the stress tag's files): the control
# half of the create race, which may look for the race for 90 s. Alone.
stress: host
	AISB_INTEGRATION=1 $(GO) test -tags "$(TAGS) stress" -count=1 -run '^TestPodmanCreateRaceControl$$' -timeout 10m -v ./tests

host:
	bash tests/host/setup.sh

clean:
	rm -rf bin test.log test-out

# Benchmarks of what the sandbox costs, side by side with podman itself and
# with the peer sandbox srt (bench/setup.sh installs it): every figure with
# its ratio and verdict, printed at the end (docs/performance.md holds them).
# About 10 minutes; they load the machine, so run nothing else meanwhile.
bench: host
	bash bench/setup.sh
	AISB_INTEGRATION=1 $(GO) test -tags "$(TAGS)" -count=1 -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/
