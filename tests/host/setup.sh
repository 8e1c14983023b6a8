#!/usr/bin/env bash
# setup.sh prepares this machine, idempotently and from nothing, for aisb's
# integration tests: rootless Podman 5 with pasta, the host fixes rootless
# Podman needs here, an unprivileged test user, an offline Debian 13 base image
# and the test upstream in its own network namespace; then the remote engine
# host for the ssh:// tests (engine-ssh.sh: a namespace of its own with sshd
# and the engine user's Podman service).
#
# It is run by `make test` (as root). Every step checks before it acts, so a
# second run on a prepared machine costs seconds. The measured recipe behind
# each step is ../shared/notes/test-host.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/host/env.sh
. "$here/env.sh"

# Each line says the seconds since the set-up began, so a run from nothing
# (make test's setup.log) shows where its time went.
log() { printf 'setup: [%3d s] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and prepares the test user)"

# mirror prints the URI of the machine's own Debian archive, so the trixie
# suite and debootstrap use the same mirror apt already uses.
mirror() {
	local uri
	uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	[ -n "$uri" ] || uri=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$uri" ] || die "cannot find the Debian archive URI in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
	printf '%s\n' "$uri"
}

podman_major() {
	podman version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1
}

# 1. Packages. Podman 5 and passt come from Debian 13 (trixie) at a low pin
#    priority, without recommends, so nothing else on the machine moves.
install_packages() {
	local need=()
	for c in slirp4netns newuidmap debootstrap dnsmasq nft ip curl tmux; do
		command -v "$c" >/dev/null 2>&1 || need+=("$c")
	done
	[ "$(podman_major)" = 5 ] || need+=("podman 5")
	command -v pasta >/dev/null 2>&1 || need+=(pasta)
	# podman kube play's pause container needs catatonit (the Kubernetes pod test).
	[ -x /usr/bin/catatonit ] || [ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
	# A JDK for the JVM client of the transparent path (tests/jvm_test.go).
	for c in sshd ssh ssh-agent ssh-keygen git javac keytool; do
		command -v "$c" >/dev/null 2>&1 || need+=("$c")
	done
	if [ ${#need[@]} -gt 0 ]; then
		log "installing packages (missing: ${need[*]})"
		if [ ! -f /etc/apt/sources.list.d/aisb-trixie.sources ]; then
			cat >/etc/apt/sources.list.d/aisb-trixie.sources <<SRC
Types: deb
URIs: $(mirror)
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		fi
		cat >/etc/apt/preferences.d/aisb-trixie <<PIN
Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
		export DEBIAN_FRONTEND=noninteractive
		apt-get -o DPkg::Lock::Timeout=600 update -qq
		apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
			slirp4netns uidmap debootstrap dnsmasq-base nftables iproute2 curl ca-certificates tmux \
			openjdk-17-jdk-headless >/dev/null
		apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends -t trixie \
			podman passt crun conmon golang-github-containers-common netavark buildah catatonit >/dev/null
		# sshd is for the test SSH server in its own namespace only: where
		# this installs it, it must never start in the root namespace.
		if ! dpkg -s openssh-server >/dev/null 2>&1; then
			mkdir -p /etc/ssh
			touch /etc/ssh/sshd_not_to_be_run
		fi
		apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends -t trixie openssh-client openssh-server git >/dev/null
	fi
	[ "$(podman_major)" = 5 ] || die "podman 5 is not installed after apt-get install"
	command -v pasta >/dev/null || die "pasta is not installed after apt-get install"
}

# 2. Host fixes rootless Podman needs on this machine (no udev, no systemd,
#    cgroup v1 hybrid).
host_fixes() {
	chmod 0666 /dev/net/tun /dev/fuse
	if [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && grep -qw hugetlb /sys/fs/cgroup/unified/cgroup.controllers; then
		mkdir -p /sys/fs/cgroup/hugetlb
		mountpoint -q /sys/fs/cgroup/hugetlb || mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
	fi
	mount --make-rshared /
	# Let users open ICMP echo sockets, so pasta and slirp4netns can carry a
	# container's ping: the escape battery's ICMP control needs a path out.
	sysctl -qw net.ipv4.ping_group_range="0 2147483647"
}

# stale_runtime empties the runtime dir of a user none of whose processes
# runs: on this machine kind /run is not a tmpfs, so a machine whose
# processes were all stopped keeps the dir, and Podman then finds a pause.pid
# naming a dead process and refuses every call ("invalid internal status").
# An empty dir (and no lock file) is what a boot gives: Podman makes its
# state anew.
# The sessions of a run stopped that way are gone too: their containers,
# volumes and secrets (every aisb- name; the test users hold only the
# tests'), which a remote test would take for ones its session left.
stale_runtime() {
	local name=$1 uid=$2
	# (A process that ended but was not reaped yet does not count.)
	ps -u "$uid" -o stat= | grep -qv '^Z' && return 0
	find "/run/user/$uid" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
	rm -f "/dev/shm/libpod_rootless_lock_$uid" # its locks, which a boot empties too
	[ -d "$(getent passwd "$name" | cut -d: -f6)/.local/share/containers/storage" ] || return 0
	as_named "$name" sh -c '
		podman ps -a --format "{{.Names}}" | grep "^aisb-" | xargs -r podman rm -f -t 0 >/dev/null
		podman volume ls --format "{{.Name}}" | grep "^aisb-" | xargs -r podman volume rm -f >/dev/null
		podman secret ls --format "{{.Name}}" | grep "^aisb-" | xargs -r podman secret rm >/dev/null' ||
		die "removing the sessions a stopped run left to $name failed"
}

# 3. The unprivileged test users, each with subordinate ids of its own (the
#    ranges disjoint), a runtime dir and overlay storage (without
#    storage.conf rootless Podman silently uses vfs). The second runs the
#    tests that must be alone on one uid, beside the others; the third the
#    harnesses' agent loops, whose image builds need a storage of their own.
test_user() {
	local name=$1 range=$2 uid home
	id -u "$name" >/dev/null 2>&1 || useradd -m -s /bin/bash "$name"
	grep -q "^$name:" /etc/subuid || usermod --add-subuids "$range" "$name"
	grep -q "^$name:" /etc/subgid || usermod --add-subgids "$range" "$name"
	uid=$(id -u "$name")
	home=$(getent passwd "$name" | cut -d: -f6)
	# Home directories closed (useradd's default here, made sure of): no
	# user, the engine user included, reads another's files.
	chmod 0700 "$home"
	install -d -m 0700 -o "$name" -g "$name" "/run/user/$uid"
	stale_runtime "$name" "$uid"
	install -d -m 0755 -o "$name" -g "$name" "$home/.config" "$home/.config/containers"
	cat >"$home/.config/containers/storage.conf" <<CONF
[storage]
driver = "overlay"
CONF
	cat >"$home/.config/containers/containers.conf" <<CONF
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
	chown "$name:" "$home/.config/containers/storage.conf" "$home/.config/containers/containers.conf"
}

# disjoint_ranges fails unless the subordinate uid and gid ranges of every
# two users (the test users, the engine user, any other) are disjoint: one
# user's containers must never map another's ids.
disjoint_ranges() {
	local f overlap
	for f in /etc/subuid /etc/subgid; do
		overlap=$(awk -F: 'BEGIN { n = 0 }
			NF >= 3 { u[n] = $1; s[n] = $2; e[n] = $2 + $3; n++ }
			END {
				for (i = 0; i < n; i++) for (j = i + 1; j < n; j++)
					if (u[i] != u[j] && s[i] < e[j] && s[j] < e[i]) { print u[i] " and " u[j]; exit }
			}' "$f")
		[ -z "$overlap" ] || die "$f: the ranges of $overlap overlap"
	done
}

# 3a. The engine user (issue #29): a test user of its own (subordinate ids,
#     runtime dir, storage), whose rootless Podman service a test starts on a
#     socket in AISB_ENGINE_SOCKETS, a directory others may enter but not
#     list: a test user reaches the service only by the path the test made,
#     and neither user reads the other's home.
#     The remote engine host's user (3c) is a second one, AISB_ENGINE_SSH_USER,
#     with a storage of its own: the ssh:// tests then run beside the
#     unix:// ones (each pair of tests that count one user's containers or
#     sshd logins is serialized per engine user, tests/remote_test.go).
engine_user() {
	local name=$1 range=$2
	test_user "$name" "$range"
	# Its storage, made once, so a test's first call does not migrate it.
	as_named "$name" podman info --format '{{.Store.GraphDriverName}}' >/dev/null
}

# 3b. The git user the test SSH server serves (upstream.sh runs sshd): git-shell
#     only, no password but not locked (sshd refuses locked accounts).
git_user() {
	id -u "$AISB_GIT_USER" >/dev/null 2>&1 ||
		useradd --system -m -d "/var/lib/$AISB_GIT_USER" -s /usr/bin/git-shell "$AISB_GIT_USER"
	usermod -p '*' "$AISB_GIT_USER"
}

# 3c. The remote engine host (issue #29, 4b): the engine user's Podman service
#     and an sshd letting only that user in, in a namespace of their own
#     (engine-ssh.sh; after upstream.sh, whose namespace it links to).
#     AISB_ENGINE_SSH_USER names the user (a helper's own:
#     AISB_ENGINE_SSH_USER=NAME AISB_ENG_NS=aisb-NAME AISB_ENG_ADDR=198.51.100.50
#     tests/host/engine-ssh.sh up, a second instance beside this one).
engine_ssh() {
	"$here/engine-ssh.sh" up
}

# 4. The offline base image: Debian 13 by debootstrap from the machine's own
#    mirror, imported into the storage of the test user named $1. Cached by
#    the hash of the package list, as a tarball and as the image.
base_image() {
	local name=$1 hash tarball tag
	hash=$(printf '%s\n' "$AISB_BASE_PACKAGES" | sha256sum | cut -c1-12)
	tarball="$AISB_CACHE/base-$hash.tar"
	# The image also depends on the machine's CAs and this recipe.
	tag=$( (echo "$hash recipe-2"; cat /usr/local/share/ca-certificates/*.crt 2>/dev/null) | sha256sum | cut -c1-12)
	if as_named "$name" podman image exists "$AISB_TEST_BASE_IMAGE-$tag" 2>/dev/null; then
		as_named "$name" podman tag "$AISB_TEST_BASE_IMAGE-$tag" "$AISB_TEST_BASE_IMAGE"
		return
	fi
	mkdir -p "$AISB_CACHE"
	if [ ! -f "$tarball" ]; then
		log "debootstrap Debian 13 base ($AISB_BASE_PACKAGES)"
		local dir="$AISB_CACHE/rootfs-$hash"
		rm -rf "$dir"
		debootstrap --variant=minbase trixie "$dir" "$(mirror)" >"$AISB_CACHE/debootstrap.log" 2>&1 ||
			die "debootstrap failed; see $AISB_CACHE/debootstrap.log"
		# apt, not debootstrap, resolves the packages: debootstrap takes the
		# first of alternatives (systemd for squid's cron dependency) and fails.
		chroot "$dir" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(echo "$AISB_BASE_PACKAGES" | tr , ' ') && apt-get clean && rm -rf /var/lib/apt/lists/*" \
			>>"$AISB_CACHE/debootstrap.log" 2>&1 || die "installing the base packages failed; see $AISB_CACHE/debootstrap.log"
		tar -C "$dir" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
		rm -rf "$dir"
	fi
	log "importing $AISB_TEST_BASE_IMAGE for $name"
	as_named "$name" podman image exists "$AISB_TEST_BASE_IMAGE-raw-$hash" ||
		as_named "$name" podman import - "$AISB_TEST_BASE_IMAGE-raw-$hash" <"$tarball" >/dev/null
	trust_machine_cas "$name" "$AISB_TEST_BASE_IMAGE-raw-$hash" "$AISB_TEST_BASE_IMAGE-$tag"
	as_named "$name" podman tag "$AISB_TEST_BASE_IMAGE-$tag" "$AISB_TEST_BASE_IMAGE"
}

# trust_machine_cas adds the machine's own extra CA certificates (this
# machine's egress re-signs TLS) to the base image, for the system store and
# for npm, so image builds can fetch packages here as they do on the host.
trust_machine_cas() {
	local name=$1 from=$2 to=$3 ctx
	ctx=$(mktemp -d)
	chmod 755 "$ctx"
	mkdir "$ctx/cas"
	cp /usr/local/share/ca-certificates/*.crt "$ctx/cas/" 2>/dev/null || true
	cat >"$ctx/Containerfile" <<CF
FROM $from
COPY cas/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null 2>&1; printf 'cafile=/etc/ssl/certs/ca-certificates.crt\n' >/etc/npmrc
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
CF
	chmod -R a+rX "$ctx"
	as_named "$name" podman build -q -t "$to" "$ctx" >/dev/null
	rm -rf "$ctx"
}

# `setup.sh base-image USER` imports the base image for one prepared test
# user only: run.sh does it for the third user at the start of its lane,
# off the build's way (AISB_SETUP_USER3_IMAGE=later skips it here).
if [ "${1:-}" = base-image ]; then
	[ -n "${2:-}" ] || die "usage: setup.sh base-image USER"
	base_image "$2"
	exit 0
fi

install_packages
host_fixes
test_user "$AISB_TEST_USER" 200000-265535
test_user "$AISB_TEST_USER2" 300000-365535
test_user "$AISB_TEST_USER3" 400000-465535
engine_user "$AISB_ENGINE_USER" 500000-565535
install -d -m 0711 -o "$AISB_ENGINE_USER" -g "$AISB_ENGINE_USER" "$AISB_ENGINE_SOCKETS"
engine_user "$AISB_ENGINE_SSH_USER" 600000-665535
disjoint_ranges
git_user
base_image "$AISB_TEST_USER"
base_image "$AISB_TEST_USER2"
[ "${AISB_SETUP_USER3_IMAGE:-}" = later ] || base_image "$AISB_TEST_USER3"
"$here/upstream.sh" up
engine_ssh
log "ready: users $AISB_TEST_USER, $AISB_TEST_USER2 and $AISB_TEST_USER3, image $AISB_TEST_BASE_IMAGE, upstream $AISB_UPSTREAM_ADDR"
