#!/usr/bin/env bash
# upstream.sh up|down|status: the test upstream, a host of our own in its own
# network namespace. Every probe of the test suite aims here (or at loopback):
#   198.51.100.10      HTTP 80 and 8080, HTTPS 443, banner 22, UDP echo 9999, DNS 53
#   2001:db8:77::10    the same services over IPv6
#   10.255.77.10, 172.31.77.10, 192.168.77.10 (private), 169.254.77.10 (link-local,
#   the metadata case), 100.64.77.10 (CGNAT): extra addresses of the same host, so
#   a test that expects an internal address to be refused only ever reaches us.
# The root namespace gets 198.51.100.1 on its end of the veth: that is "the host's
# own address" for the gate's tests. It is a /32 (and 2001:db8:77::1 a /128) with a
# route to the upstream: the upstream is a routed host, not on one of the host's
# on-link networks, which the gate refuses whole. Nothing of 203.0.113.0/24 is
# ever configured.
# DNS answers the .test names below and logs every query in $state/dns.log.
# refused.test is the escape battery's alone: its check that a refused name
# is never resolved must not see another test's query for it. For the same
# reason other.test and unlisted.test are the packages' (gate/ checks that
# they are never resolved) and another.test and unnamed.test tests/', whose
# tests run beside them (tests/run.sh). The transparent path's tests own
# tp.test and tprefused.test, the Kubernetes pod's kube.test and
# kuberefused.test, the remote engine's remote.test and remoterefused.test,
# the engine that shares the project's path shared.test and sharedrefused.test,
# the ssh:// engine's sshengine.test, sshrefused.test, sshgit.test (the SSH
# server's) and, for its live steering, sshlisted.test, sshlive.test,
# sshask.test and sshliverefused.test, and the unix:// engine's live
# steering's (tests/remote_live_test.go) remotelisted.test, remotelive.test,
# remoteask.test and liverefused.test, for the same reason.
#
# HTTPS is signed by a test CA of the upstream's own, made at each start and
# written to $state/ca.pem; every request's headers go to $state/headers.log.
#
# The test SSH server is OpenSSH's sshd in a namespace of its own, aisb-ssh
# (198.51.100.22 on a /30 whose other end, 198.51.100.21/32 with a route, is the root
# namespace's): the upstream's namespace already listens on *:22, and a
# second listener on a port that a wildcard socket holds is refused. It has
# a throw-away host key made here ($state/ssh), lets $AISB_GIT_USER in with the
# keys a test writes to $state/ssh/authorized_keys/$AISB_GIT_USER, and nothing
# else; git.test and gitother.test name it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

ns=$AISB_UPSTREAM_NS
state=/run/aisb-upstream
internal=(10.255.77.10 172.31.77.10 192.168.77.10 169.254.77.10 100.64.77.10)

hosts() {
	cat <<HOSTS
$AISB_UPSTREAM_ADDR allowed.test www.allowed.test api.allowed.test other.test unlisted.test another.test unnamed.test refused.test sub.domain.test
$AISB_UPSTREAM_ADDR tp.test tprefused.test kube.test kuberefused.test remote.test remoterefused.test
$AISB_UPSTREAM_ADDR shared.test sharedrefused.test
$AISB_UPSTREAM_ADDR remotelisted.test remotelive.test remoteask.test liverefused.test
127.0.0.1 loopback.test
10.255.77.10 private.test mixed.test
172.31.77.10 private172.test
192.168.77.10 private192.test
169.254.77.10 metadata.test
100.64.77.10 cgnat.test
198.51.100.1 hostself.test
$AISB_UPSTREAM_ADDR mixed.test
2001:db8:77::10 v6.test
$AISB_UPSTREAM_ADDR sshengine.test sshrefused.test sshlisted.test sshlive.test sshask.test sshliverefused.test
$AISB_SSH_ADDR git.test gitother.test sshgit.test
HOSTS
}

healthy() {
	ip netns pids "$ns" >/dev/null 2>&1 || return 1
	[ -f "$state/upstream.pid" ] && kill -0 "$(cat "$state/upstream.pid")" 2>/dev/null || return 1
	[ -f "$state/dnsmasq.pid" ] && kill -0 "$(cat "$state/dnsmasq.pid")" 2>/dev/null || return 1
	[ -f "$state/ca.pem" ] || return 1
	[ -f "$state/upstream.sum" ] && [ "$(cat "$state/upstream.sum")" = "$(sha256sum <"$AISB_CACHE/upstream")" ] || return 1
	[ "$(cat "$state/hosts" 2>/dev/null)" = "$(hosts)" ] || return 1
	curl -fsS --max-time 3 "http://$AISB_UPSTREAM_ADDR/health" >/dev/null 2>&1
}

# closefds runs a command with no descriptors above 2 (but bash's own 255).
closefds() {
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && [ "$fd" != 255 ] && eval "exec $fd>&-"
		done
		exec "$@"
	)
}

stop_daemons() {
	for p in upstream dnsmasq; do
		if [ -f "$state/$p.pid" ]; then
			pid=$(cat "$state/$p.pid")
			kill "$pid" 2>/dev/null || true
			# Wait until it is gone: a new one cannot bind its ports before.
			for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
		rm -f "$state/$p.pid"
	done
	rm -f "$state/ca.pem"
	# The namespace holds nothing but these daemons: a daemon whose pid was
	# not recorded (a wrapper's pid was) must not survive to hold the ports.
	local pids
	pids=$(ip netns pids "$ns" 2>/dev/null || true)
	[ -n "$pids" ] && kill $pids 2>/dev/null || true
	for _ in $(seq 30); do
		[ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
		sleep 0.1
	done
}


network() {
	ip netns list | grep -qw "^$ns" || ip netns add "$ns"
	if ! ip link show aisb-up0 >/dev/null 2>&1; then
		ip link add aisb-up0 type veth peer name eth0 netns "$ns"
	fi
	# Host addresses, not networks: /32 and /128 plus a route to the upstream
	# (an earlier layout gave the /24 and /64 on-link; remove them).
	ip addr del 198.51.100.1/24 dev aisb-up0 2>/dev/null || true
	ip -6 addr del 2001:db8:77::1/64 dev aisb-up0 2>/dev/null || true
	ip addr replace 198.51.100.1/32 dev aisb-up0
	ip -6 addr replace 2001:db8:77::1/128 dev aisb-up0 nodad
	ip link set aisb-up0 up
	ip route replace "$AISB_UPSTREAM_ADDR/32" dev aisb-up0
	ip -6 route replace 2001:db8:77::10/128 dev aisb-up0
	ip -n "$ns" link set lo up
	ip -n "$ns" addr replace "$AISB_UPSTREAM_ADDR/24" dev eth0
	ip -n "$ns" -6 addr replace 2001:db8:77::10/64 dev eth0 nodad
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route replace default via 198.51.100.1
	ip -n "$ns" -6 route replace default via 2001:db8:77::1
	for a in "${internal[@]}"; do
		ip -n "$ns" addr replace "$a/32" dev lo
		ip route replace "$a/32" via "$AISB_UPSTREAM_ADDR" dev aisb-up0
	done
}

sshdir=$state/ssh

sshd_config() {
	cat <<CONF
# The aisb test SSH server: git over SSH for $AISB_GIT_USER, keys only.
ListenAddress $AISB_SSH_ADDR:22
HostKey $sshdir/host_ed25519
PidFile $sshdir/sshd.pid
AuthorizedKeysFile $sshdir/authorized_keys/%u
AllowUsers $AISB_GIT_USER
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
# Every test connection comes from the host's one address; OpenSSH 10 would
# otherwise penalise it for probes that never authenticate.
PerSourcePenalties no
LogLevel VERBOSE
CONF
}

ssh_healthy() {
	ip netns pids "$AISB_SSH_NS" >/dev/null 2>&1 || return 1
	[ -f "$sshdir/sshd.pid" ] && kill -0 "$(cat "$sshdir/sshd.pid")" 2>/dev/null || return 1
	[ "$(cat "$sshdir/sshd_config" 2>/dev/null)" = "$(sshd_config)" ] || return 1
	local banner
	banner=$(timeout 3 bash -c "exec 3<>/dev/tcp/$AISB_SSH_ADDR/22 && head -c 8 <&3" 2>/dev/null) || return 1
	[ "$banner" = "SSH-2.0-" ]
}

ssh_network() {
	local ns=$AISB_SSH_NS
	ip netns list | grep -qw "^$ns" || ip netns add "$ns"
	if ! ip link show aisb-ssh0 >/dev/null 2>&1; then
		ip link add aisb-ssh0 type veth peer name eth0 netns "$ns"
	fi
	# A host address and a route, not an on-link /30: the gate refuses the
	# host's on-link networks, and git.test stands for a host on the internet.
	ip addr del 198.51.100.21/30 dev aisb-ssh0 2>/dev/null || true
	ip addr replace 198.51.100.21/32 dev aisb-ssh0
	ip link set aisb-ssh0 up
	ip route replace "$AISB_SSH_ADDR/32" dev aisb-ssh0
	ip -n "$ns" link set lo up
	ip -n "$ns" addr replace "$AISB_SSH_ADDR/30" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route replace default via 198.51.100.21
}

ssh_up() {
	[ -x /usr/sbin/sshd ] || { echo "upstream.sh: /usr/sbin/sshd is missing; run tests/host/setup.sh" >&2; exit 1; }
	ssh_network
	install -d -m 0755 "$sshdir" "$sshdir/authorized_keys" /run/sshd
	[ -f "$sshdir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C aisb-test-host -f "$sshdir/host_ed25519"
	ssh_healthy && return 0
	[ -f "$sshdir/sshd.pid" ] && kill "$(cat "$sshdir/sshd.pid")" 2>/dev/null || true
	rm -f "$sshdir/sshd.pid"
	sshd_config >"$sshdir/sshd_config"
	closefds ip netns exec "$AISB_SSH_NS" /usr/sbin/sshd -f "$sshdir/sshd_config" -E "$sshdir/sshd.log"
	for _ in $(seq 50); do
		ssh_healthy && return 0
		sleep 0.1
	done
	echo "upstream.sh: the test SSH server did not come up; see $sshdir/sshd.log" >&2
	exit 1
}

ssh_down() {
	[ -f "$sshdir/sshd.pid" ] && kill "$(cat "$sshdir/sshd.pid")" 2>/dev/null || true
	rm -f "$sshdir/sshd.pid"
	ip link del aisb-ssh0 2>/dev/null || true
	ip netns del "$AISB_SSH_NS" 2>/dev/null || true
}

up() {
	mkdir -p "$state" "$AISB_CACHE"
	(cd "$here/../.." && CGO_ENABLED=0 go build -o "$AISB_CACHE/upstream.new" ./tests/upstream)
	mv "$AISB_CACHE/upstream.new" "$AISB_CACHE/upstream"
	network
	ssh_up
	healthy && return 0
	stop_daemons
	hosts >"$state/hosts"
	: >>"$state/dns.log"
	closefds ip netns exec "$ns" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
		--addn-hosts="$state/hosts" --local=/test/ --log-queries --log-facility="$state/dns.log" \
		--pid-file="$state/dnsmasq.pid" --user=root --group=root --interface=eth0 --bind-interfaces
	# In the background with its descriptors closed, as the last command of
	# the subshell: $! is the daemon itself, and it holds no lock of ours.
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && [ "$fd" != 255 ] && eval "exec $fd>&-"
		done
		exec ip netns exec "$ns" setsid "$AISB_CACHE/upstream" -log "$state/connections.log" \
			-ca "$state/ca.pem" -headers "$state/headers.log" \
			-names "$(hosts | awk '{for (i = 2; i <= NF; i++) print $i}' | sort -u | paste -sd,)" \
			</dev/null >>"$state/upstream.err" 2>&1
	) &
	echo $! >"$state/upstream.pid"
	sha256sum <"$AISB_CACHE/upstream" >"$state/upstream.sum"
	for _ in $(seq 50); do
		healthy && return 0
		sleep 0.1
	done
	echo "upstream.sh: the test upstream did not come up; see $state/upstream.err" >&2
	exit 1
}

down() {
	ssh_down
	stop_daemons
	for a in "${internal[@]}"; do ip route del "$a/32" 2>/dev/null || true; done
	ip link del aisb-up0 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
}

case "${1:-}" in
up) up ;;
down) down ;;
status) healthy && ssh_healthy && echo "upstream: healthy" || { echo "upstream: down"; exit 1; } ;;
*) echo "usage: upstream.sh up|down|status" >&2; exit 2 ;;
esac
