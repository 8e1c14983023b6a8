// Package entrypoint is the sandbox's first process: it locks the network
// namespace with a verified default-drop table, drops every privilege, then
// execs the command. It fails closed: the command never runs unenforced.
package entrypoint

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/google/nftables"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/ruleset"
)

// Exit statuses; aisb turns 77 and 78 into a sentence for the user.
const (
	ExitEnforce  = contract.ExitEnforce // the table or the privilege drop could not be enforced
	ExitPolicy   = contract.ExitPolicy  // the session policy is missing, unreadable or invalid
	ExitUsage    = 64                   // EX_USAGE: no command given
	ExitNoExec   = 126                  // the command exists but cannot be executed
	ExitNotFound = 127                  // the command does not exist
)

// Entrypoint runs the fixed sequence.
type Entrypoint struct {
	policyPath string
	statusPath string
	uid, gid   int
	stderr     io.Writer
	nft        func() (*nftables.Conn, error)
	caBundle   string
	gateWait   time.Duration
	// A transparent sandbox's relay: the binary ("" is this one), the
	// resolv.conf pointed at it, the sysctl that keeps its ports the
	// relay's.
	relayExe   string
	resolvConf string
	portStart  string
	tr         *tracer
}

// New returns the entrypoint with its production settings.
func New() *Entrypoint {
	e := &Entrypoint{
		policyPath: contract.PolicyPath,
		statusPath: contract.StatusPath,
		uid:        contract.AgentUID,
		gid:        contract.AgentGID,
		stderr:     os.Stderr,
		nft:        lastingNft,
		caBundle:   contract.CABundle,
		gateWait:   contract.GateWait,
		resolvConf: contract.ResolvConf,
		portStart:  "/proc/sys/net/ipv4/ip_unprivileged_port_start",
	}
	return e
}

// stepError names the step that failed and carries the exit status.
type stepError struct {
	step string
	code int
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func fail(step string, code int, err error) *stepError {
	return &stepError{step: step, code: code, err: err}
}

// Main parses args (without the program name), runs the sequence and returns
// an exit status; on success it does not return, because the command replaced
// this process.
func (e *Entrypoint) Main(args []string) int {
	e.tr = newTracer(e.stderr)
	fs := flag.NewFlagSet("aisb-entrypoint", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	unenforced := fs.Bool("allow-unenforced", false, "when the network table cannot be installed or verified, run the command without it (the privilege drop still happens)")
	fs.StringVar(&e.policyPath, "policy", contract.PolicyPath, "session policy `file` (tests only; aisb always uses the default)")
	fs.StringVar(&e.statusPath, "status", contract.StatusPath, "status `file` (tests only; aisb always uses the default)")
	fs.DurationVar(&e.gateWait, "gate-wait", contract.GateWait, "how long to wait for the gate when the policy says so (tests only)")
	fs.StringVar(&e.resolvConf, "resolv-conf", contract.ResolvConf, "resolver configuration `file` a transparent sandbox points at the relay (tests only)")
	fs.StringVar(&e.relayExe, "relay", "", "relay `binary` instead of this one (tests only)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: aisb-entrypoint [--allow-unenforced] -- COMMAND [ARGS...]")
	}
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return ExitUsage
	}
	// The status file is opened first, as root, so that every outcome
	// below is reported where the command cannot write.
	st, err := openStatus(e.statusPath)
	if err != nil {
		fmt.Fprintf(e.stderr, "aisb-entrypoint: status file: %v\n", err)
		return ExitEnforce
	}
	e.tr.mark("flags, status file")
	err = e.run(fs.Args(), *unenforced, st)
	e.tr.flush()
	code, step := ExitEnforce, "enforce"
	var se *stepError
	if errors.As(err, &se) {
		code, step = se.code, se.step
	}
	fmt.Fprintf(e.stderr, "aisb-entrypoint: %v\n", err)
	st.report(contract.Status{Outcome: contract.OutcomeFailed, Code: code, Step: step})
	return code
}

// run is the fail-closed sequence. Its steps run in this order and no other:
// the command is exec'd only after every step before it succeeded.
func (e *Entrypoint) run(argv []string, unenforced bool, st *statusWriter) error {
	// The table is bound to this thread's network namespace, and the
	// capability and no_new_privs state that the command inherits is per
	// thread: everything from here to execve happens on this one thread.
	runtime.LockOSThread()

	// 1. Read the session policy. Missing, unreadable or invalid: the
	//    command never runs.
	b, err := os.ReadFile(e.policyPath)
	if err != nil {
		return fail("read policy", ExitPolicy, err)
	}
	p, err := contract.ParsePolicy(b)
	if err != nil {
		return fail("read policy", ExitPolicy, fmt.Errorf("%s: %w", e.policyPath, err))
	}
	e.tr.mark("read policy")

	// 1b. A transparent sandbox's relay (3c) is started now, as its own
	//     user (neither root nor the agent), from this thread, so that its
	//     start runs beside the table's install; it is checked at 3c. No
	//     relay, no command (--allow-unenforced does not change that).
	var relay *startedRelay
	if p.Transparent {
		var err error
		if relay, err = e.transparent(); err != nil {
			return fail(StepRelay, ExitEnforce, err)
		}
		// Killed on every way out but the exec: it would outlive an
		// entrypoint that never runs its command.
		defer func() {
			if relay != nil {
				relay.kill()
			}
		}()
	}

	// 2. and 3. Install the table in one batch, then read it back and
	//    compare it field by field. Reading back needs CAP_NET_ADMIN too,
	//    so both happen before the privilege drop.
	//    --allow-unenforced changes only what happens when that fails.
	outcome := contract.Status{Outcome: contract.OutcomeEnforced}
	if p.Mode == contract.ModeOpen {
		fmt.Fprintln(e.stderr, "aisb-entrypoint: WARNING: network mode open: no network table installed; the sandbox can reach anything the host can")
		outcome = contract.Status{Outcome: contract.OutcomeOpen}
	} else if err := e.enforce(p); err != nil {
		var se *stepError
		if !unenforced || !errors.As(err, &se) || se.code != ExitEnforce {
			return err
		}
		fmt.Fprintf(e.stderr, "aisb-entrypoint: WARNING: --allow-unenforced: %v; running without a network table: this sandbox's network is NOT enforced\n", err)
		outcome = contract.Status{Outcome: contract.OutcomeUnenforced, Step: se.step}
	}
	e.tr.mark("table read back")

	// 3b. Trust the gate's session CA (credential hosts), while the bundle
	//     is still writable: afterwards the agent cannot change it.
	if p.SessionCA != "" {
		if err := trustSessionCA([]byte(p.SessionCA), e.caBundle); err != nil {
			return fail("trust the session CA", ExitEnforce, err)
		}
		e.tr.mark("session CA trusted")
	}

	// 3c. The relay, started at 1b, is checked from outside before
	//     anything of the agent's runs: it said it is ready, and its ids,
	//     capabilities, seccomp and resolver are what they must be.
	if relay != nil {
		pid, err := relay.wait()
		if err == nil {
			e.tr.mark("relay: ready")
			err = verifyRelay(pid)
		}
		if err != nil {
			return fail(StepRelay, ExitEnforce, err)
		}
		e.tr.mark("relay: verified")
	}

	// 4. Drop every privilege and check that nothing is left.
	if err := dropPrivileges(e.uid, e.gid); err != nil {
		return fail("drop privileges", ExitEnforce, err)
	}
	e.tr.mark("privileges dropped")
	if err := verifyPrivileges(e.uid, e.gid); err != nil {
		return fail("verify privileges", ExitEnforce, err)
	}
	e.tr.mark("privileges verified")

	// 5. Restrict socket families to UNIX, INET, INET6 and NETLINK and
	//    refuse io_uring, with a seccomp filter the command inherits and
	//    cannot remove (seccomp.go). It needs no_new_privs from step 4, and
	//    --allow-unenforced does not skip it.
	if err := restrictSockets(); err != nil {
		return fail("restrict socket families", ExitEnforce, err)
	}
	e.tr.mark("seccomp filter")

	// 6. Find the command, as the agent user.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		code := ExitNotFound
		if errors.Is(err, os.ErrPermission) {
			code = ExitNoExec
		}
		return fail("exec "+argv[0], code, err)
	}
	e.tr.mark("command found")

	// 7. When the policy says so, wait for aisb's word that the gate is
	//    ready (a file it creates beside the policy): the sandbox starts,
	//    and the steps above run, while the session's gate still starts,
	//    and the command's first request must find the gate ready. No word
	//    within the wait, and the command never runs.
	if p.AwaitGate {
		if err := awaitFile(filepath.Join(filepath.Dir(e.policyPath), contract.GateReadyFile), e.gateWait); err != nil {
			return fail(contract.StepAwaitGate, ExitEnforce, err)
		}
		e.tr.mark("gate's word")
	}

	// 8. Exec the command on this same thread.
	// Reported through the descriptor opened as root; it closes on exec.
	if err := st.report(outcome); err != nil {
		return fail("write status", ExitEnforce, err)
	}
	e.tr.mark("status written")
	e.tr.flush()
	err = syscall.Exec(path, argv, os.Environ())
	// The exec failed: the deferred kill stops the relay.
	return fail("exec "+argv[0], ExitNoExec, err)
}

// StepRelay is the step reported when a transparent sandbox's relay is not
// in place.
const StepRelay = "start the relay"

// transparent checks that the agent cannot take the relay's ports, points
// resolv.conf at the relay and starts it.
func (e *Entrypoint) transparent() (*startedRelay, error) {
	if err := checkLowPorts(e.portStart); err != nil {
		return nil, err
	}
	if err := pointResolvConf(e.resolvConf); err != nil {
		return nil, fmt.Errorf("point resolv.conf at the relay: %w", err)
	}
	e.tr.mark("relay: ports checked, resolv.conf")
	relay, err := e.startRelay()
	if err != nil {
		return nil, err
	}
	e.tr.mark("relay: started")
	return relay, nil
}

func (e *Entrypoint) enforce(p contract.Policy) error {
	rs, err := ruleset.Build(p)
	if err != nil {
		return fail("build table", ExitPolicy, err)
	}
	e.tr.mark("table built")
	return installTable(e.nft, rs, "the sandbox needs CAP_NET_ADMIN for its first moments", e.tr)
}
