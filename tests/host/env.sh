# env.sh holds the names the test host is built from; sourced by setup.sh and
# upstream.sh, and mirrored in internal/testhost for the Go tests.
AISB_TEST_USER=${AISB_TEST_USER:-aisbtest}
# The second test user: the tests that must be alone on one uid (they count
# or stop everything of their user) run as this one, beside the others.
AISB_TEST_USER2=${AISB_TEST_USER2:-aisbtest2}
# The third test user: the agent loops of the harnesses run as this one, in
# a Podman storage of their own (their image builds hold its locks for
# seconds at a time, which slowed the other tests' sessions in a shared one).
AISB_TEST_USER3=${AISB_TEST_USER3:-aisbtest3}
# The engine user: a rootless Podman service of another user, which the
# test users reach only through a socket a test starts in AISB_ENGINE_SOCKETS
# (issue #29: aisb refuses an engine that is not its own, local one).
AISB_ENGINE_USER=${AISB_ENGINE_USER:-aisbengine}
AISB_ENGINE_SOCKETS=/run/aisb-engine
# The remote engine host's user (engine-ssh.sh): another engine user, with a
# storage of its own, so the ssh:// tests need not wait for the unix:// ones.
AISB_ENGINE_SSH_USER=${AISB_ENGINE_SSH_USER:-aisbengine2}
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
as_user() { as_named "$AISB_TEST_USER" "$@"; }

# as_named USER CMD... is as_user for the test user named USER.
as_named() {
	local name=$1 uid home
	shift
	uid=$(id -u "$name")
	home=$(getent passwd "$name" | cut -d: -f6)
	(cd / && runuser -u "$name" -- env -i HOME="$home" USER="$name" \
		XDG_RUNTIME_DIR="/run/user/$uid" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
		PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$@")
}

# The remote engine host (engine-ssh.sh): a namespace of its own with sshd and
# AISB_ENGINE_SSH_USER's Podman service, reached as
# ssh://AISB_ENGINE_SSH_USER@AISB_ENG_ADDR/run/user/UID/podman/podman.sock.
AISB_ENG_NS=${AISB_ENG_NS:-aisb-eng}
AISB_ENG_ADDR=${AISB_ENG_ADDR:-198.51.100.42}
