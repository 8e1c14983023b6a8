// One session's steps and its one teardown, in one file of about 440
// lines: the teardown's order is the session's guarantee, and it reads
// against the steps that set up what it undoes.

package session

import (
	"context"
	"fmt"
	"os"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/progs"
	"github.com/aisb-dev/aisb/internal/project"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/review"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

// run is one session in progress: what Run has set up so far, each part
// nil (or zero) until its step succeeded, and the one teardown that undoes
// them in a fixed order (teardown). Run's steps fill it in; nothing else
// does.
type run struct {
	o     Options
	trace func(string)

	// The programs put into the engine's containers, for its architecture
	// (findPrograms); gateHelper only when the session starts its own gate.
	entrypoint, gateHelper string

	// Decided before anything starts (plan).
	h       harness.Preset
	command []string
	limits  limits
	env     map[string]string
	ssh     sshParts
	gitDirs []project.GitMount
	creds   []squidconf.Credential

	// The session's resources, in the order Run acquires them.
	c podman
	// remote says the engine is not local (Connect's decision): nothing
	// of this host is mounted, the gate goes through the API (remote.go).
	remote bool
	// shared says that the remote engine was shown to see the project at
	// the same path (checkShared): it is bind-mounted as on a local
	// engine; else the project is copied to projectVol, a volume on the
	// engine's host. sharedWhy is what the check found.
	shared     bool
	sharedWhy  string
	pathCheck  bool // the check's container was asked for (removed again at the end)
	projectVol string
	sent       []string // what the project's copy held at the start
	podman     *podmanPrep
	id         string
	owner      string
	dir        string // the session's directory
	wd         *reaper.Watchdog
	st         *steer
	helper     string // the network helper (pasta or slirp4netns)
	imgs       images
	rv         *review.Session
	net        *network
	vols       []*specgen.NamedVolume
	// closeState records what the session changed in its state volume.
	closeState func()
	box        sandboxBox
	// leave says that the exited sandbox is the watchdog's to remove: its
	// Podman cleanup then runs off the user's path.
	leave bool

	// started says that the session no longer starts (state.Starting).
	started func()

	// steps lists the teardown's steps as they ran (for the order tests).
	steps []string
}

// sandboxBox is what a session does with its sandbox container
// (sandbox.Box); a test gives a fake.
type sandboxBox interface {
	Start() error
	Wait() (sandbox.Exit, error)
	Leave()
	Remove()
}

// plan decides everything that needs neither Podman nor the session's
// files: the harness, its command, the limits, the environment, the SSH
// set-up, the git directories and the credentials. Bad input stops the
// session here, before anything starts.
func plan(o Options) (*run, error) {
	r := &run{o: o, trace: tracer(o.Trace, o.Logf), started: func() {}}
	cfg := o.Config.Config
	var err error
	if r.h, err = harness.Lookup(cfg.Sandbox.Harness); err != nil {
		return nil, err
	}
	if err := checkAsk(o); err != nil {
		return nil, err
	}
	r.command = o.Command
	if len(r.command) == 0 {
		r.command = r.h.Command
	}
	if r.limits, err = resolveLimits(cfg.Limits, o.RlimitFallback, o.CPUSeconds); err != nil {
		return nil, err
	}
	if r.env, err = buildEnv(cfg.Env, os.LookupEnv); err != nil {
		return nil, err
	}
	if r.ssh, err = sshSetup(o); err != nil {
		return nil, err
	}
	if r.gitDirs, err = gitDirMounts(o.ProjectDir, o.Review, o.Logf); err != nil {
		return nil, err
	}
	if err := checkCredentialMode(len(cfg.Credentials), cfg.Network.Mode, o.GateName); err != nil {
		return nil, err
	}
	if r.creds, err = gateCredentials(cfg.Credentials, os.LookupEnv); err != nil {
		return nil, err
	}
	credentialEnv(r.env, r.creds)
	return r, nil
}

// connect reaches Podman and starts what it does before the session
// creates anything (preparePodman: the images' check and builds, the sweep
// of dead sessions' containers), while the project is scanned for socket
// files; the scan's verdict is awaited here.
func (r *run) connect(ctx context.Context) error {
	o := r.o
	// The walk of the project and the hashing of the images' inputs run
	// while Podman gets ready. The programs for the engine's containers
	// are found for its architecture: known at once for a Podman of this
	// host, else asked once connected (a Mac's engine is a VM's), and the
	// hashing waits for that.
	var specs func() ([]image.Hashed, error)
	arch, local := engine.HostArch(o.Where)
	if local {
		if err := r.findPrograms(arch); err != nil {
			return err
		}
	}
	sockets := scanSockets(o.ProjectDir, project.ScanBudget, o.AllowProjectSockets, o.Logf)
	if local {
		specs = hashImages(o, r.h, r.entrypoint)
	}
	// What runs beside the connect ends before a session that stops here
	// does (the hashing writes the digests' record).
	drain := func() {
		sockets()
		if specs != nil {
			specs()
		}
	}
	c, err := o.seams.connectFunc()(ctx, o.Where)
	if err != nil {
		drain()
		return err
	}
	r.c = c
	r.trace("connected to podman (" + c.How() + ")")
	if loc := c.Locality(); !loc.Local {
		r.remote = true
		if err := checkRemote(o, r); err != nil {
			drain()
			return err
		}
		r.trace("engine not local (" + loc.Why + "): the policy, the gate's files, the audit, the gate's ports and the project go through its API")
	} else {
		r.trace("engine local: the policy and the gate's directory are bind-mounted, the audit read from its file")
	}
	if !local {
		if arch, err = c.Arch(ctx); err != nil {
			return err
		}
		r.trace("engine's machine: linux/" + arch)
		if err := r.findPrograms(arch); err != nil {
			return err
		}
		specs = hashImages(o, r.h, r.entrypoint)
	}
	r.podman = preparePodman(c, o, specs, !r.remote)
	if r.remote {
		// The sweep judges containers by this host's processes: on an
		// engine that is not local they may be another host's live
		// sessions, so it does not run there (remote.go).
		r.trace("no sweep of dead sessions on an engine that is not local")
	}
	if err := sockets(); err != nil {
		return err
	}
	r.trace("project scanned")
	return nil
}

// openSession makes the session's directory and marks it running for its
// project, starts its watchdog and its steering (registry entry, audit,
// live server), while Podman prepares.
func (r *run) openSession() error {
	o := r.o
	r.id, r.owner = state.NewSessionID(), state.Owner()
	dir := o.Paths.SessionDir(r.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("session directory: %w", err)
	}
	r.dir = dir
	// aisb trust refuses while a session of the project runs.
	if err := o.Paths.MarkSession(r.id, o.ProjectDir, r.owner); err != nil {
		return err
	}
	r.trace("session directory")
	if o.Watchdog != nil {
		wd, err := reaper.StartWatchdog(o.Watchdog, r.owner, r.id)
		if err != nil {
			return err
		}
		r.wd = wd
		r.trace("watchdog started")
	}
	st, err := startSteer(o, r.id, dir, r.owner, r.gateHelper, r.remote)
	if err != nil {
		return err
	}
	r.st = st
	r.trace("steering ready (with a gate: its audit, the live server)")
	return nil
}

// openImages waits for Podman's preparation (the images, the sweep) and,
// in review mode, records the project for the copy-on-write overlay.
func (r *run) openImages() error {
	var err error
	if r.helper, r.imgs, err = r.podman.wait(); err != nil {
		return err
	}
	r.trace("images ready, reaped")
	if r.remote {
		r.checkShared()
	}
	// On an engine that is not local and does not see the project, every
	// session is a review session: the agent works on a copy (remote.go).
	if r.o.Review || (r.remote && !r.shared) {
		rv, err := review.Begin(r.dir, review.Meta{Session: r.id, Project: r.o.ProjectDir, Owner: r.owner, Image: r.imgs.sandbox})
		if err != nil {
			return err
		}
		r.rv = rv
		r.trace("review: project recorded")
	}
	return nil
}

// openState mounts the harness's state volume for the session's scope.
func (r *run) openState() error {
	vols, closeState, err := openState(r.c, r.o, r.h, r.imgs.sandbox, r.env)
	if err != nil {
		return err
	}
	r.vols, r.closeState = vols, closeState
	r.trace("state volume ready")
	return nil
}

// overlay is the review layer the sandbox mounts over the project, or nil.
func (r *run) overlay() *sandbox.Overlay {
	if r.rv == nil || r.remote {
		return nil
	}
	return &sandbox.Overlay{Upper: r.rv.Upper(), Work: r.rv.Work()}
}

// createSandbox creates the sandbox container. It is created and started
// while its gate starts (the policy already names the gate's port): its
// entrypoint installs the table and drops every privilege meanwhile, then
// waits for aisb's word that the gate is ready before it execs the command,
// so that the agent's very first request, HTTP or HTTPS, finds it. The
// gate's create has returned: creates never overlap (engine.Create).
func (r *run) createSandbox() error {
	o, cfg := r.o, r.o.Config.Config
	box, err := sandbox.Create(r.c, sandbox.Options{
		Session: r.id, Image: r.imgs.sandbox, ProjectDir: o.ProjectDir, Command: r.command,
		Mode: cfg.Network.Mode, Helper: r.helper, PolicyDir: r.net.policyDir, Files: r.ssh.files, AgentSock: r.ssh.agentSock,
		GitDirs: r.gitDirs, Env: r.env, HostAdd: r.net.hostAdd, DNS: dnsIPs(cfg.Network.Resolvers()),
		Terminal: o.Terminal, Unenforced: o.Unenforced,
		PidsLimit: r.limits.pids, Memory: r.limits.memory, CPUs: r.limits.cpus, Rlimits: r.limits.rlimits,
		Volumes: r.vols, Owner: r.owner, Finisher: r.wd.Owner(), Overlay: r.overlay(), StatusReader: o.StatusReader,
		Remote: r.remote, ProjectVolume: r.projectVol, SharedProject: r.shared, ProjectCopied: r.copied, Exited: r.exitedHook(),
		Logf: o.Logf, Trace: r.trace, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
	})
	if err != nil {
		return err
	}
	r.box = box
	return nil
}

// exitedHook: on an engine that is not local the gate's end begins as soon
// as the sandbox has exited and its network is gone (network.finishEarly);
// teardown's step 3 waits for it. A local session has none (its gate goes
// to the watchdog), so its sandbox's status is read without waiting for
// Podman's cleanup.
func (r *run) exitedHook() func() {
	if !r.remote {
		return nil
	}
	return func() { r.net.finishEarly(r.trace) }
}

// runSandbox creates and starts the sandbox, lists the session (aisb ps) and tells the
// entrypoint that the gate is ready, then waits for the command's exit.
// The session is listed, and steerable, before the agent runs: at once
// where the command runs as the sandbox starts, once the gate is ready
// where the entrypoint waits for it.
func (r *run) runSandbox() (sandbox.Exit, error) {
	if err := r.createSandbox(); err != nil {
		return sandbox.Exit{}, err
	}
	n := r.net
	if !n.awaited {
		if err := r.st.publish(n.gatePort); err != nil {
			return sandbox.Exit{}, err
		}
	}
	if err := r.box.Start(); err != nil {
		return sandbox.Exit{}, err
	}
	if err := n.ready(); err != nil {
		return sandbox.Exit{}, err
	}
	if n.awaited {
		if err := r.st.publish(n.gatePort); err != nil {
			return sandbox.Exit{}, err
		}
		tell := func() error { return sandbox.TellGateReady(n.policyDir) }
		if r.remote {
			tell = func() error { return sandbox.TellGateReadyIn(r.c, r.id) }
		}
		if err := tell(); err != nil {
			return sandbox.Exit{}, err
		}
		r.trace("entrypoint told the gate is ready")
	}
	r.trace("network ready")
	r.started()
	exit, err := r.box.Wait()
	if err == nil && r.remote && r.rv != nil {
		r.importChanges()
	}
	if err == nil {
		// In review mode the overlay is scrubbed once the sandbox is gone
		// (endReview): aisb removes it itself.
		// On a remote engine the project's volume goes once the sandbox
		// is gone: aisb removes the sandbox itself.
		r.leave = r.wd != nil && r.rv == nil && !r.remote
	}
	return exit, err
}

// teardown undoes what the session set up, in this order, each step only
// for a part that was set up. The order carries the session's guarantees:
// nothing passes the gate while its audit is completed, the audit is
// complete before the gate's secrets go, and they go before its container.
// A step's failure is said on stderr and the next steps still run.
func (r *run) teardown() {
	handedOff := false // the watchdog took the gate over (step 3)
	// 1. The sandbox goes first: nothing may send through the gate while
	//    its audit is completed. An exited sandbox is left to the watchdog
	//    to remove (its Podman cleanup runs off the user's path), any other
	//    is removed now.
	if r.box != nil {
		r.step("sandbox")
		if r.leave {
			r.box.Leave()
		} else {
			r.box.Remove()
		}
	}
	// 2. The state volume: which settings files the session changed, read
	//    once the sandbox can no longer change them.
	if r.closeState != nil {
		r.step("state")
		r.closeState()
		r.trace("state recorded")
	}
	// 2b. The path check's container, should its own removal have failed
	//    or come before a create the engine finished late (seen under
	//    load); then the project's copy on a remote engine, once the
	//    sandbox is gone.
	if r.pathCheck {
		r.step("path check")
		r.removePathCheck()
	}
	if r.projectVol != "" {
		r.step("project")
		r.removeProject()
	}
	// 3. The network: squid is quiesced and stopped and the gate's audit
	//    completed, or the gate is handed to the watchdog, which does the
	//    same (and steps 6 and 7) after aisb has returned (Finish); on an
	//    engine that is not local it began once the sandbox exited
	//    (sandboxExited), and this waits for it. A
	//    sandbox left to the watchdog with no gate handed over is handed to
	//    it now.
	if r.net != nil {
		r.step("network")
		r.net.finish(r.trace)
		handedOff = r.net.handedOff
		if r.leave && !handedOff {
			if err := r.wd.RemoveSandbox(); err != nil {
				r.o.Logf("%v", err)
				r.box.Remove()
			}
		}
	}
	// 4. Review: the overlay's work directory is scrubbed once the sandbox
	//    is gone; the user hears how to see the agent's changes.
	if r.rv != nil {
		r.step("review")
		endReview(r.c, r.rv, r.imgs.sandbox, r.owner, r.remote, r.o.Logf)
	}
	// 5. Steering: the session leaves `aisb ps`, its live server stops and
	//    its audit file closes (the gate's follower stopped in step 3).
	if r.st != nil {
		r.step("steering")
		r.st.stop(handedOff)
	}
	// 6. The gate's secrets (squid.conf with the credentials' values, the
	//    session CA's key), once its audit is complete.
	if r.dir != "" && !handedOff {
		r.step("secrets")
		if err := gate.RemoveSecrets(gateDir(r.dir)); err != nil {
			r.o.Logf("%v", err)
		}
	}
	// 7. The gate's container.
	if r.net != nil && r.net.gate != nil && !handedOff {
		r.step("gate")
		r.net.removeGate(r.trace)
	}
	// 8. The watchdog hears that the session ended (after a hand-over it
	//    already knows, and this says nothing).
	if r.wd != nil {
		r.step("watchdog")
		r.wd.Stop()
	}
	// 9. Podman's preparation may still run after an early error: it ends
	//    before the connection closes.
	if r.podman != nil {
		r.step("podman")
		r.podman.wait()
	}
	if r.c != nil {
		r.c.Close()
	}
	r.trace("done")
}

func (r *run) step(name string) { r.steps = append(r.steps, name) }

// findPrograms finds the entrypoint and, for a session with a gate of its
// own, the gate's helper, built for an engine of arch (or the user's
// $AISB_ENTRYPOINT and $AISB_GATEHELPER, checked the same).
func (r *run) findPrograms(arch string) error {
	ep, err := progs.Find(progs.Entrypoint, arch, r.o.Entrypoint)
	if err != nil {
		return err
	}
	r.entrypoint = ep
	if ownGate(r.o) {
		if r.gateHelper, err = progs.Find(progs.GateHelper, arch, r.o.GateHelper); err != nil {
			return err
		}
	}
	return nil
}
