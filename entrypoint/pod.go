package entrypoint

// A Kubernetes pod (aisb kube) splits the sequence in two containers that
// share one network namespace. `aisb-entrypoint table`, the init container,
// the only one with CAP_NET_ADMIN (and nothing else), installs the table,
// reads it back from the kernel, and writes its record (the namespace it
// is in and the table as verified) to the pod's emptyDir. `aisb-entrypoint
// pod`, the agent container's entrypoint, starts as the agent (uid 1000, no
// capability, no_new_privs) and so cannot list the table (every nftables
// request needs CAP_NET_ADMIN); it checks what it can see instead: the
// record names its own network namespace and the table its policy builds,
// byte for byte. Any difference, a missing record, a privilege left: exit
// 77 and the command never runs.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/google/nftables"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/ruleset"
)

// PodSelfAddr is where the agent's entrypoint connects from to see the gate
// listen: the gate's audit.SelfAddr (TestPodSelfAddr holds them equal).
const PodSelfAddr = "127.0.0.3"

// ErrRecord is wrapped when the init container's record is missing or is
// not the table this policy builds in this network namespace.
var ErrRecord = errors.New("the init container's record of the table")

// Pod is the pod form's two commands.
type Pod struct {
	policyPath string
	dir        string // contract.PodDir
	caBundle   string // the image's bundle (contract.CABundle)
	uid, gid   int
	stderr     io.Writer
	nft        func() (*nftables.Conn, error)
	netns      func() (string, error)
	wait       time.Duration // how long the agent waits for the gate; 0: contract.GateWait
}

// NewPod returns the pod form with its production settings.
func NewPod() *Pod {
	return &Pod{
		policyPath: contract.PolicyPath,
		dir:        contract.PodDir,
		caBundle:   contract.CABundle,
		uid:        contract.AgentUID,
		gid:        contract.AgentGID,
		stderr:     os.Stderr,
		nft:        lastingNft,
		netns:      func() (string, error) { return os.Readlink("/proc/thread-self/ns/net") },
	}
}

// Record is the init container's record: the network namespace, then the
// table as verified, as `nft list ruleset` prints it.
func Record(netns string, rs *ruleset.Ruleset) string {
	return "# aisb pod table, verified in " + netns + "\n" + rs.Text()
}

func (p *Pod) flags(name string, args []string) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("aisb-entrypoint "+name, flag.ContinueOnError)
	fs.SetOutput(p.stderr)
	fs.StringVar(&p.policyPath, "policy", p.policyPath, "session policy `file` (tests only)")
	fs.StringVar(&p.dir, "dir", p.dir, "the pod's record `directory` (tests only)")
	fs.DurationVar(&p.wait, "gate-wait", contract.GateWait, "how long the agent waits for the gate (tests only)")
	return fs, fs.Parse(args)
}

// policy reads the pod's policy: a pod's has a gate uid.
func (p *Pod) policy() (contract.Policy, *ruleset.Ruleset, error) {
	b, err := os.ReadFile(p.policyPath)
	if err != nil {
		return contract.Policy{}, nil, fail("read policy", ExitPolicy, err)
	}
	pol, err := contract.ParsePolicy(b)
	if err != nil {
		return contract.Policy{}, nil, fail("read policy", ExitPolicy, fmt.Errorf("%s: %w", p.policyPath, err))
	}
	if pol.GateUID == 0 {
		return contract.Policy{}, nil, fail("read policy", ExitPolicy, fmt.Errorf("%s: not a pod's policy (no gate_uid); aisb kube renders one", p.policyPath))
	}
	rs, err := ruleset.Build(pol)
	if err != nil {
		return contract.Policy{}, nil, fail("build table", ExitPolicy, err)
	}
	return pol, rs, nil
}

func (p *Pod) exit(err error) int {
	code := ExitEnforce
	var se *stepError
	if errors.As(err, &se) {
		code = se.code
	}
	fmt.Fprintf(p.stderr, "aisb-entrypoint: %v\n", err)
	return code
}

// TableMain is `aisb-entrypoint table`: install, verify, record. It exits 0
// only when the record is written.
func (p *Pod) TableMain(args []string) int {
	if _, err := p.flags("table", args); err != nil {
		return ExitUsage
	}
	runtime.LockOSThread()
	if err := p.table(); err != nil {
		return p.exit(err)
	}
	return 0
}

func (p *Pod) table() error {
	// A record left from before (a volume that outlived its pod) is
	// removed first: this init's record or none.
	for _, f := range []string{contract.PodRecord, contract.PodCABundle} {
		if err := os.Remove(filepath.Join(p.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail("record table", ExitEnforce, err)
		}
	}
	pol, rs, err := p.policy()
	if err != nil {
		return err
	}
	if err := installTable(p.nft, rs, "the init container needs CAP_NET_ADMIN", &tracer{}); err != nil {
		return err
	}
	ns, err := p.netns()
	if err != nil {
		return fail("record table", ExitEnforce, err)
	}
	if pol.SessionCA != "" {
		// The agent container's own bundle is root's in its image: the
		// init writes a copy with the session CA for the agent's variables.
		old, err := os.ReadFile(p.caBundle)
		if err != nil {
			return fail("trust the session CA", ExitEnforce, err)
		}
		bundle := filepath.Join(p.dir, contract.PodCABundle)
		if err := writeAtomic(bundle, old); err != nil {
			return fail("trust the session CA", ExitEnforce, err)
		}
		if err := trustSessionCA([]byte(pol.SessionCA), bundle); err != nil {
			return fail("trust the session CA", ExitEnforce, err)
		}
	}
	if err := writeAtomic(filepath.Join(p.dir, contract.PodRecord), []byte(Record(ns, rs))); err != nil {
		return fail("record table", ExitEnforce, err)
	}
	fmt.Fprintf(p.stderr, "aisb-entrypoint: table installed and verified in %s\n", ns)
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".aisb-tmp"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// PodMain is `aisb-entrypoint pod -- COMMAND...`: check, then exec; on
// success it does not return.
func (p *Pod) PodMain(args []string) int {
	fs, err := p.flags("pod", args)
	if err != nil {
		return ExitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(p.stderr, "usage: aisb-entrypoint pod -- COMMAND [ARGS...]")
		return ExitUsage
	}
	return p.exit(p.pod(fs.Args()))
}

// maxRecord bounds what is read of the record.
const maxRecord = 64 << 10

func (p *Pod) pod(argv []string) error {
	// Capabilities, no_new_privs and the seccomp filter are per thread:
	// every step to execve happens on this one.
	runtime.LockOSThread()
	pol, rs, err := p.policy()
	if err != nil {
		return err
	}
	// 1. The agent container runs as the agent, with nothing to drop:
	//    check that it is so (runAsUser, capabilities dropped,
	//    allowPrivilegeEscalation false).
	// The runtime may list the agent's own group as a supplementary group
	// (podman does): that one, or none.
	err = verifyPrivileges(p.uid, p.gid)
	if err != nil {
		err = checkPrivileges(p.uid, p.gid, strconv.Itoa(p.gid))
	}
	if err != nil {
		return fail("verify privileges", ExitEnforce, fmt.Errorf("%w (the agent container must run as %d:%d with every capability dropped and allowPrivilegeEscalation false)", err, p.uid, p.gid))
	}
	// 2. The table: the kernel's own listing where it answers (it needs
	//    CAP_NET_ADMIN, which this container has not), and in any case the
	//    init container's record, which must name this network namespace
	//    and the table this policy builds.
	if conn, err := p.nft(); err == nil {
		if err := rs.Verify(conn); err != nil && !errors.Is(err, syscall.EPERM) {
			return fail("verify table", ExitEnforce, err)
		}
	}
	ns, err := p.netns()
	if err != nil {
		return fail("verify table", ExitEnforce, err)
	}
	got, err := safefile.Read(filepath.Join(p.dir, contract.PodRecord), maxRecord)
	if err != nil {
		return fail("verify table", ExitEnforce, fmt.Errorf("%w: %v (the init container installs it: aisb-entrypoint table)", ErrRecord, err))
	}
	if want := Record(ns, rs); string(got) != want {
		return fail("verify table", ExitEnforce, fmt.Errorf("%w differs from the table of this policy in %s", ErrRecord, ns))
	}
	if pol.SessionCA != "" {
		b, err := safefile.Read(filepath.Join(p.dir, contract.PodCABundle), 16<<20)
		if err != nil || !containsCert(b, pol.SessionCA) {
			return fail("trust the session CA", ExitEnforce, fmt.Errorf("%s lacks the session CA", filepath.Join(p.dir, contract.PodCABundle)))
		}
	}
	// 3. The socket families, as in a local session.
	if err := restrictSockets(); err != nil {
		return fail("restrict socket families", ExitEnforce, err)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		code := ExitNotFound
		if errors.Is(err, os.ErrPermission) {
			code = ExitNoExec
		}
		return fail("exec "+argv[0], code, err)
	}
	// 4. The gate is a container beside this one, started with it: the
	//    command's first request must find it listening.
	if err := awaitListener(pol.Gate.String(), p.gateWait()); err != nil {
		return fail(contract.StepAwaitGate, ExitEnforce, err)
	}
	err = syscall.Exec(path, argv, os.Environ())
	return fail("exec "+argv[0], ExitNoExec, err)
}

func (p *Pod) gateWait() time.Duration {
	if p.wait > 0 {
		return p.wait
	}
	return contract.GateWait
}

// awaitListener returns once addr (the gate on the pod's loopback) accepts
// a connection, trying every 50 ms, or fails after wait. It connects from
// audit.SelfAddr (127.0.0.3), as squid checks its own ports: the gate logs
// a connection that carried no request, and the audit drops such a line
// from that address only as bookkeeping.
func awaitListener(addr string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(PodSelfAddr)}}
	for {
		c, err := d.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gate at %s did not listen within %s: %w", addr, wait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containsCert(bundle []byte, ca string) bool {
	return bytes.Contains(bundle, bytes.TrimSpace([]byte(ca)))
}
