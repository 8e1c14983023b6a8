# env.sh holds the names the test host is built from; sourced by setup.sh and
# upstream.sh, and mirrored in internal/testhost for the Go tests.
AISB_TEST_USER=${AISB_TEST_USER:-aisbtest}
AISB_CACHE=${AISB_CACHE:-/var/cache/aisb-test}
AISB_TEST_BASE_IMAGE=localhost/aisb-base:trixie
# Everything the sandbox and gate images need, so building them never waits
# on a registry; the Containerfiles install only what a base lacks.
AISB_BASE_PACKAGES=ca-certificates,curl,fd-find,git,nodejs,npm,openssh-client,python3,ripgrep,squid-openssl,util-linux,passwd
AISB_UPSTREAM_NS=aisb-up
AISB_UPSTREAM_ADDR=198.51.100.10
# The test SSH server: OpenSSH's sshd in a namespace of its own (the
# upstream's namespace already listens on *:22), serving git to one user.
AISB_SSH_NS=aisb-ssh
AISB_SSH_ADDR=198.51.100.22
AISB_GIT_USER=aisbgit

# as_user runs a command as the test user with a clean rootless-Podman
# environment (no systemd session on this host).
as_user() {
	local uid home
	uid=$(id -u "$AISB_TEST_USER")
	home=$(getent passwd "$AISB_TEST_USER" | cut -d: -f6)
	(cd / && runuser -u "$AISB_TEST_USER" -- env -i HOME="$home" USER="$AISB_TEST_USER" \
		XDG_RUNTIME_DIR="/run/user/$uid" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
		PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$@")
}
