#!/usr/bin/env bash
# upstream.sh up|down|status: the test upstream, a host of our own in its own
# network namespace. Every probe of the test suite aims here (or at loopback):
#   198.51.100.10      HTTP 80 and 8080, HTTPS 443, banner 22, UDP echo 9999, DNS 53
#   2001:db8:77::10    the same services over IPv6
#   10.255.77.10, 172.31.77.10, 192.168.77.10 (private), 169.254.77.10 (link-local,
#   the metadata case), 100.64.77.10 (CGNAT): extra addresses of the same host, so
#   a test that expects an internal address to be refused only ever reaches us.
# The root namespace gets 198.51.100.1 on its end of the veth: that is "the host's
# own address" for the gate's tests. Nothing of 203.0.113.0/24 is ever configured.
# DNS answers the .test names below and logs every query in $state/dns.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

ns=$AISB_UPSTREAM_NS
state=/run/aisb-upstream
internal=(10.255.77.10 172.31.77.10 192.168.77.10 169.254.77.10 100.64.77.10)

hosts() {
	cat <<HOSTS
$AISB_UPSTREAM_ADDR allowed.test www.allowed.test api.allowed.test other.test unlisted.test sub.domain.test
127.0.0.1 loopback.test
10.255.77.10 private.test mixed.test
172.31.77.10 private172.test
192.168.77.10 private192.test
169.254.77.10 metadata.test
100.64.77.10 cgnat.test
198.51.100.1 hostself.test
$AISB_UPSTREAM_ADDR mixed.test
2001:db8:77::10 v6.test
HOSTS
}

healthy() {
	ip netns pids "$ns" >/dev/null 2>&1 || return 1
	[ -f "$state/upstream.pid" ] && kill -0 "$(cat "$state/upstream.pid")" 2>/dev/null || return 1
	[ -f "$state/dnsmasq.pid" ] && kill -0 "$(cat "$state/dnsmasq.pid")" 2>/dev/null || return 1
	[ -f "$state/upstream.sum" ] && [ "$(cat "$state/upstream.sum")" = "$(sha256sum <"$AISB_CACHE/upstream")" ] || return 1
	curl -fsS --max-time 3 "http://$AISB_UPSTREAM_ADDR/health" >/dev/null 2>&1
}

stop_daemons() {
	for p in upstream dnsmasq; do
		[ -f "$state/$p.pid" ] && kill "$(cat "$state/$p.pid")" 2>/dev/null || true
		rm -f "$state/$p.pid"
	done
}

network() {
	ip netns list | grep -qw "^$ns" || ip netns add "$ns"
	if ! ip link show aisb-up0 >/dev/null 2>&1; then
		ip link add aisb-up0 type veth peer name eth0 netns "$ns"
	fi
	ip addr replace 198.51.100.1/24 dev aisb-up0
	ip -6 addr replace 2001:db8:77::1/64 dev aisb-up0 nodad
	ip link set aisb-up0 up
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

up() {
	mkdir -p "$state" "$AISB_CACHE"
	(cd "$here/../.." && CGO_ENABLED=0 go build -o "$AISB_CACHE/upstream.new" ./tests/upstream)
	mv "$AISB_CACHE/upstream.new" "$AISB_CACHE/upstream"
	network
	healthy && return 0
	stop_daemons
	hosts >"$state/hosts"
	: >>"$state/dns.log"
	ip netns exec "$ns" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
		--addn-hosts="$state/hosts" --local=/test/ --log-queries --log-facility="$state/dns.log" \
		--pid-file="$state/dnsmasq.pid" --user=root --group=root --interface=eth0 --bind-interfaces
	ip netns exec "$ns" setsid "$AISB_CACHE/upstream" -log "$state/connections.log" \
		-names "$(hosts | awk '{for (i = 2; i <= NF; i++) print $i}' | sort -u | paste -sd,)" \
		</dev/null >>"$state/upstream.err" 2>&1 &
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
	stop_daemons
	for a in "${internal[@]}"; do ip route del "$a/32" 2>/dev/null || true; done
	ip link del aisb-up0 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
}

case "${1:-}" in
up) up ;;
down) down ;;
status) healthy && echo "upstream: healthy" || { echo "upstream: down"; exit 1; } ;;
*) echo "usage: upstream.sh up|down|status" >&2; exit 2 ;;
esac
