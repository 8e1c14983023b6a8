#!/usr/bin/env bash
# engine-ssh.sh up|down|status: a remote engine host for the ssh:// tests
# (issue #29, 4b), idempotently: a network namespace of its own ($AISB_ENG_NS,
# aisb-eng) standing for another machine, with
#   - OpenSSH's sshd on $AISB_ENG_ADDR:22 (a throw-away host key made here in
#     $state/ssh), letting in only the engine user ($AISB_ENGINE_SSH_USER), by the
#     keys a test writes to $state/ssh/authorized_keys/$AISB_ENGINE_SSH_USER, with
#     local forwarding only (a unix socket is what podman's ssh:// transport
#     uses; sshd allows that only with local TCP forwarding);
#   - the engine user's rootless `podman system service` on its usual socket
#     /run/user/UID/podman/podman.sock, started *inside* the namespace, so a
#     gate with --network=host and pasta's sandbox live on that namespace's
#     loopback and interfaces, as on a real remote;
#   - the offline base image in the engine user's storage.
# Addresses, all in the /29 block of $AISB_ENG_ADDR (198.51.100.42 by default:
# 198.51.100.40/29, unused by upstream.sh and env.sh; a second instance takes
# another block, e.g. AISB_ENG_ADDR=198.51.100.50 for .48/29), B its base:
#   ${ns}0 (root ns)   B+1/32, route to $AISB_ENG_ADDR/32
#   eth0 (ns)           $AISB_ENG_ADDR = B+2/30, default via B+1 (pasta needs a
#                       default route; the root namespace does not forward, so
#                       it leads nowhere beyond this host)
#   ssh0 (ns)           B+5/32, route to the test SSH server's $AISB_SSH_ADDR/32:
#                       a veth of its own into $AISB_SSH_NS (end there named
#                       after the namespace, no address, a route back to B+5),
#                       so a gate on the engine host reaches git over SSH
#   up0 (ns)            B+6/32, route to the upstream's 198.51.100.10/32:
#                       a veth of its own into $AISB_UPSTREAM_NS, whose end
#                       there (named after the namespace, aisbeng for aisb-eng)
#                       has no address, only a route back to B+6. No
#                       forwarding is enabled anywhere; nothing of 203.0.113.0/24.
# /etc/netns/$AISB_ENG_NS/resolv.conf names the upstream's DNS (ip netns exec
# mounts it over /etc/resolv.conf for what runs in the namespace).
# The instance's state (sshd's host key, config, log, the keys a test
# authorizes, the service's pid and log) is in /run/$ns.
# Run by setup.sh after upstream.sh (its namespace must exist); as root.
# Parameters: AISB_ENGINE_SSH_USER (default aisbengine2), AISB_ENG_NS (aisb-eng),
# AISB_ENG_ADDR (198.51.100.42); a second instance needs all three its own.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

ns=$AISB_ENG_NS
eu=$AISB_ENGINE_SSH_USER
state=/run/$ns
sshdir=$state/ssh

die() { printf 'engine-ssh.sh: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"

# The namespace names the interfaces (at most 15 bytes): ${ns}0 in the root
# namespace, and the peers in the upstream's and the SSH server's namespaces.
case $ns in
aisb-*) ;;
*) die "AISB_ENG_NS=$ns: the engine host's namespace must be named aisb-SOMETHING" ;;
esac
root_if=${ns}0
peer_if=${ns//-/}
[ ${#root_if} -le 15 ] || die "AISB_ENG_NS=$ns is too long: its interface $root_if must fit in 15 bytes"
# The block of $AISB_ENG_ADDR: it must be the third address of a /29 in
# 198.51.100.40-255 (below are the upstream's and the SSH server's).
case $AISB_ENG_ADDR in
198.51.100.*) last=${AISB_ENG_ADDR##*.} ;;
*) die "AISB_ENG_ADDR=$AISB_ENG_ADDR: the engine host's address must be in 198.51.100.0/24 (the test hosts' range)" ;;
esac
[[ $last =~ ^[0-9]+$ ]] && [ "$last" -ge 40 ] && [ "$last" -le 255 ] && [ $((last % 8)) = 2 ] ||
	die "AISB_ENG_ADDR=$AISB_ENG_ADDR: the engine host's address must be the third of a /29 in 198.51.100.40-255 (.42, .50, .58, ...)"
block=$((last - 2))
root_end=198.51.100.$((block + 1))
ssh_end=198.51.100.$((block + 5))
up_end=198.51.100.$((block + 6))

# closefds runs a daemon with no inherited descriptors beyond 0-2.
closefds() { setsid "$@" </dev/null >/dev/null 2>&1 & }

# peer_link DEV NS END ADDR links the engine host (its DEV, address END)
# to the host ADDR in namespace NS by a /32 route each way; recreated when
# upstream.sh remade NS.
peer_link() {
	local dev=$1 peer_ns=$2 end=$3 addr=$4
	if ! ip -n "$ns" link show "$dev" >/dev/null 2>&1; then
		ip -n "$ns" link add "$dev" type veth peer name "$peer_if" netns "$peer_ns"
	fi
	ip -n "$ns" addr replace "$end/32" dev "$dev"
	ip -n "$ns" link set "$dev" up
	ip -n "$ns" route replace "$addr/32" dev "$dev" src "$end"
	ip -n "$peer_ns" link set "$peer_if" up
	ip -n "$peer_ns" route replace "$end/32" dev "$peer_if" src "$addr"
}

network() {
	ip netns list | grep -qw "^$ns" || ip netns add "$ns"
	ip netns list | grep -qw "^$AISB_UPSTREAM_NS" || die "the upstream's namespace $AISB_UPSTREAM_NS is missing; run tests/host/upstream.sh up (setup.sh does)"
	ip link show "$root_if" >/dev/null 2>&1 || ip link add "$root_if" type veth peer name eth0 netns "$ns"
	ip addr replace "$root_end/32" dev "$root_if"
	ip link set "$root_if" up
	ip route replace "$AISB_ENG_ADDR/32" dev "$root_if"
	ip -n "$ns" link set lo up
	ip -n "$ns" addr replace "$AISB_ENG_ADDR/30" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route replace default via "$root_end"
	# The link to the upstream, and to the test SSH server (git over SSH
	# through a gate on the engine host).
	peer_link up0 "$AISB_UPSTREAM_NS" "$up_end" "$AISB_UPSTREAM_ADDR"
	ip netns list | grep -qw "^$AISB_SSH_NS" || die "the test SSH server's namespace $AISB_SSH_NS is missing; run tests/host/upstream.sh up (setup.sh does)"
	peer_link ssh0 "$AISB_SSH_NS" "$ssh_end" "$AISB_SSH_ADDR"
	install -d -m 0755 "/etc/netns/$ns"
	printf 'nameserver %s\n' "$AISB_UPSTREAM_ADDR" >"/etc/netns/$ns/resolv.conf"
}

sshd_config() {
	cat <<CONF
# The aisb remote engine host's sshd: $eu only, keys only, socket forwarding only.
ListenAddress $AISB_ENG_ADDR:22
HostKey $sshdir/host_ed25519
PidFile $sshdir/sshd.pid
AuthorizedKeysFile $sshdir/authorized_keys/%u
AllowUsers $eu
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# sshd permits a direct-streamlocal channel (podman's ssh:// transport) only
# where local TCP forwarding is permitted too; nothing remote.
AllowTcpForwarding local
AllowStreamLocalForwarding local
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
PerSourcePenalties no
LogLevel VERBOSE
CONF
}

sshd_healthy() {
	[ -f "$sshdir/sshd.pid" ] && kill -0 "$(cat "$sshdir/sshd.pid")" 2>/dev/null || return 1
	[ "$(cat "$sshdir/sshd_config" 2>/dev/null)" = "$(sshd_config)" ] || return 1
	local banner
	banner=$(timeout 3 bash -c "exec 3<>/dev/tcp/$AISB_ENG_ADDR/22 && head -c 8 <&3" 2>/dev/null) || return 1
	[ "$banner" = "SSH-2.0-" ]
}

sshd_up() {
	[ -x /usr/sbin/sshd ] || die "/usr/sbin/sshd is missing; run tests/host/setup.sh"
	install -d -m 0755 "$sshdir" "$sshdir/authorized_keys" /run/sshd
	[ -f "$sshdir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C aisb-engine-host -f "$sshdir/host_ed25519"
	# sshd refuses a locked account ("!" in shadow); no password, not locked.
	usermod -p '*' "$eu"
	sshd_healthy && return 0
	[ -f "$sshdir/sshd.pid" ] && kill "$(cat "$sshdir/sshd.pid")" 2>/dev/null || true
	rm -f "$sshdir/sshd.pid"
	sshd_config >"$sshdir/sshd_config"
	closefds ip netns exec "$ns" /usr/sbin/sshd -f "$sshdir/sshd_config" -E "$sshdir/sshd.log"
	for _ in $(seq 50); do
		sshd_healthy && return 0
		sleep 0.1
	done
	die "the engine host's sshd did not come up; see $sshdir/sshd.log"
}

euid() { id -u "$eu"; }
sock() { echo "/run/user/$(euid)/podman/podman.sock"; }
pidfile() { echo "$state/podman-$eu.pid"; }

service_healthy() {
	local pid
	pid=$(cat "$(pidfile)" 2>/dev/null) || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	[ "$(ip netns identify "$pid" 2>/dev/null)" = "$ns" ] || return 1
	[ "$(as_named "$eu" curl -sS --max-time 5 --unix-socket "$(sock)" http://d/_ping 2>/dev/null)" = OK ]
}

# other_services stops the services this instance started for another
# engine user (before AISB_ENGINE_SSH_USER changed).
other_services() {
	local f
	for f in "$state"/podman-*.pid; do
		[ -e "$f" ] && [ "$f" != "$(pidfile)" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
}

service_up() {
	id -u "$eu" >/dev/null 2>&1 || die "engine user $eu is missing (setup.sh's engine_user makes it)"
	other_services
	service_healthy && return 0
	local pid
	pid=$(cat "$(pidfile)" 2>/dev/null) && kill "$pid" 2>/dev/null || true
	install -d -m 0700 -o "$eu" -g "$eu" "/run/user/$(euid)"
	as_named "$eu" mkdir -p "/run/user/$(euid)/podman"
	rm -f "$(sock)"
	# Started in the namespace, then as the user (ip netns exec needs root).
	setsid ip netns exec "$ns" runuser -u "$eu" -- env -i HOME="$(getent passwd "$eu" | cut -d: -f6)" USER="$eu" \
		XDG_RUNTIME_DIR="/run/user/$(euid)" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
		PODMAN_IGNORE_CGROUPSV1_WARNING=1 podman system service --time=0 "unix://$(sock)" \
		</dev/null >"$state/podman-$eu.log" 2>&1 &
	echo $! >"$(pidfile)"
	for _ in $(seq 100); do
		service_healthy && return 0
		sleep 0.2
	done
	die "$eu's podman service in $ns did not come up; see $state/podman-$eu.log"
}

# base_image gives the engine user the offline base image (from the test
# user's storage, as setup.sh built it there), for the tests' containers.
base_image() {
	as_named "$eu" podman image exists "$AISB_TEST_BASE_IMAGE" && return 0
	as_named "$AISB_TEST_USER" podman image exists "$AISB_TEST_BASE_IMAGE" ||
		die "$AISB_TEST_USER has no $AISB_TEST_BASE_IMAGE to copy (setup.sh's base_image makes it)"
	as_named "$AISB_TEST_USER" podman save "$AISB_TEST_BASE_IMAGE" | as_named "$eu" podman load -q >/dev/null
}

up() {
	install -d -m 0755 "$state"
	network
	sshd_up
	base_image
	service_up
}

down() {
	local pid
	pid=$(cat "$(pidfile)" 2>/dev/null) && kill "$pid" 2>/dev/null || true
	rm -f "$(pidfile)"
	other_services
	[ -f "$sshdir/sshd.pid" ] && kill "$(cat "$sshdir/sshd.pid")" 2>/dev/null || true
	rm -f "$sshdir/sshd.pid"
	ip link del "$root_if" 2>/dev/null || true
	ip -n "$AISB_UPSTREAM_NS" link del "$peer_if" 2>/dev/null || true
	ip -n "$AISB_SSH_NS" link del "$peer_if" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "/etc/netns/$ns"
}

case ${1:-} in
up) up ;;
down) down ;;
status) sshd_healthy && service_healthy && echo "engine host $ns: healthy" || { echo "engine host $ns: down"; exit 1; } ;;
*) die "usage: engine-ssh.sh up|down|status" ;;
esac
