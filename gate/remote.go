package gate

// (One file of about 450 lines: the probe, the copy of the gate's files,
// its logs and its life are one path, each step what the next relies on.)
//
// A gate on an engine that is not local (engine.Locality: another user's
// Podman, another host's): aisb cannot bind-mount its directory there,
// read that host's socket table, hold or watch ports on its loopback, or
// signal squid's process. So everything goes through the API:
//
//   - the gate container's first step is a probe on the engine host's
//     network: aisb-gatehelper --probe (copied in, built for that machine)
//     picks the two ports on that host's loopback and lists that host's
//     addresses (the deny list's), printed as one JSON line on its stderr,
//     which aisb reads from the container's logs; then it waits for the
//     gate's files and execs squid in its place;
//   - squid.conf and the TLS files are written on aisb's side as for a
//     local gate, for the probe's ports and addresses, then copied into the
//     running gate container by archive (owned by squid's proxy user, the
//     word that they are there last); no bind mount;
//   - squid writes its access log to its stdout and its cache log to its
//     stderr (squidconf.Config.Stream); aisb follows the container's logs
//     through the API into the same access.log and cache.log in the gate's
//     directory on its side, which the audit follower and readiness read
//     unchanged. The stream ends when the container stops, so once squid
//     is killed and the stream has ended, the copy is complete;
//   - ready is squid's check of its TLS port seen in that copy while the
//     container runs; alive is the container running (asked every 250 ms).
//   - with a live server (aisb allow, ask mode), squid's helper asks the
//     bridge in the gate, which aisb runs there as an exec and answers
//     (bridge.go); the gate is ready once the bridge listens.
//
// Not done there: the hold of the TLS port (hold.go), the check that squid
// alone listens on it (alive.go) and the take-over of the front when the
// gate dies, which all need that host's loopback; the host's addresses are
// read once, at the start (WatchHost follows a local gate's only).

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/netaddr"
)

// Remote is what a gate on an engine that is not local needs besides
// Options: the probe's program.
type Remote struct {
	// Probe is aisb-gatehelper built for the engine's machine (it runs
	// there as the probe, squid's helper and its bridge).
	Probe string
	// Ask, when set, answers the names the gate's list does not hold (the
	// session's live server: aisb allow, ask mode): squid's helper asks
	// the bridge in the gate, which relays each question here through the
	// API (bridge.go). Nil: the gate admits its list alone.
	Ask func(host string) bool
	// Logf says on stderr what goes wrong with the question path.
	Logf func(string, ...any)
}

// ProbeResult is what the probe printed (cmd/aisb-gatehelper's Probe).
type ProbeResult struct {
	Port    int      `json:"port"`
	TLSPort int      `json:"tls_port"`
	Addrs   []string `json:"addrs"`
}

// ErrProbe wraps a probe that said nothing usable.
var ErrProbe = errors.New("the gate's probe on the engine's host failed")

// probeProgram is where the probe's program is copied in the gate.
const probeProgram = "/aisb-gatehelper"

// filesReady is the helper's word file (cmd/aisb-gatehelper's ReadyFile).
const filesReady = ".aisb-files"

// probeWait bounds how long aisb waits for the probe's line.
const probeWait = 20 * time.Second

// remoteCommand is the remote gate's command: the probe, then squid.
func remoteCommand() (entrypoint, command []string) {
	return []string{probeProgram, "--probe", dirInContainer, "--"}, []string{"squid", "-N", "-f", dirInContainer + "/squid.conf"}
}

// copyProbe copies the probe's program into the created gate, root's, and
// with ask the bridge's directory, squid's user's alone.
func copyProbe(c engine.Engine, name, program string, ask bool) error {
	bin, err := os.ReadFile(program)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProbe, err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(probeProgram, "/"), Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg, ModTime: time.Now()})
	tw.Write(bin)
	if ask {
		tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(bridgeDir, "/") + "/", Mode: 0o700, Typeflag: tar.TypeDir, Uid: proxyUID, Gid: proxyUID, ModTime: time.Now()})
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := c.ContainerCopyIn(context.TODO(), name, "/", &tb, engine.CopyOptions{KeepOwners: true}); err != nil {
		return fmt.Errorf("%w: copy its program in: %v", ErrProbe, err)
	}
	return nil
}

// probeAsk is how often probeLine asks the gate's logs itself.
const probeAsk = 25 * time.Millisecond

// probeLine waits for the probe's line in the copy of the gate's stderr
// (cache.log) while the gate runs. It also asks the logs to their present
// end every probeAsk: the service's follow reads the container's log file
// every 250 ms (Podman's tail polls it), and the session waits for this
// line before anything else of the gate.
func (g *Gate) probeLine(c engine.Engine) (ProbeResult, error) {
	deadline := time.Now().Add(probeWait)
	var asked time.Time
	for i := 0; ; i++ {
		if b, err := os.ReadFile(filepath.Join(g.Dir, "cache.log")); err == nil {
			if line, _, ok := bytes.Cut(b, []byte("\n")); ok {
				return parseProbe(line)
			}
		}
		if time.Since(asked) >= probeAsk {
			asked = time.Now()
			if line, ok := g.firstErrLine(c); ok {
				return parseProbe(line)
			}
		}
		if time.Now().After(deadline) {
			return ProbeResult{}, fmt.Errorf("%w: no word within %s", ErrProbe, probeWait)
		}
		if i%25 == 24 && !g.running(c) {
			g.logsEnded(time.Second)
			return ProbeResult{}, fmt.Errorf("%w: the gate exited: %s", ErrProbe, g.squidError())
		}
		time.Sleep(4 * time.Millisecond)
	}
}

// firstErrLine is the first line of the gate's stderr so far, asked of
// the service (not followed); false while there is none.
func (g *Gate) firstErrLine(c engine.Engine) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var errs bytes.Buffer
	if err := c.ContainerLogs(ctx, g.Name, false, io.Discard, &errs); err != nil {
		return nil, false
	}
	line, _, ok := bytes.Cut(errs.Bytes(), []byte("\n"))
	return line, ok
}

// parseProbe reads the probe's line; ports must be two distinct ones.
func parseProbe(b []byte) (ProbeResult, error) {
	var p ProbeResult
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return ProbeResult{}, fmt.Errorf("%w: its output %q: %v", ErrProbe, truncate(b, 200), err)
	}
	if p.Port < 1 || p.Port > 65535 || p.TLSPort < 1 || p.TLSPort > 65535 || p.Port == p.TLSPort {
		return ProbeResult{}, fmt.Errorf("%w: ports %d and %d", ErrProbe, p.Port, p.TLSPort)
	}
	if len(p.Addrs) == 0 {
		return ProbeResult{}, fmt.Errorf("%w: no host address listed", ErrProbe)
	}
	return p, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// createRemote is Create for an engine that is not local: the gate is
// created and started, its probe read, and its files, written here for
// the probe's ports and addresses, copied in; squid starts once they are
// there. On failure the gate is removed.
func createRemote(c engine.Engine, o Options) (*Gate, error) {
	if o.HelperDir != "" {
		// A directory of this host cannot be mounted there: the question
		// path is the bridge (Remote.Ask).
		return nil, errors.New("start gate: a gate on an engine that is not local asks through the API (Remote.Ask), not a helper directory of this host")
	}
	tokens, err := newTokens()
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	s, err := Spec(o)
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	g := &Gate{Name: s.Name, Session: o.Session, Dir: o.Dir, token: tokens.Sandbox, remote: c}
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return nil, fmt.Errorf("start gate: create %s: %w", g.Name, err)
	}
	fail := func(err error) (*Gate, error) {
		return nil, errors.Join(fmt.Errorf("start gate: %w", err), g.Kill(c))
	}
	if err := copyProbe(c, g.Name, o.Remote.Probe, o.Remote.Ask != nil); err != nil {
		return fail(err)
	}
	// A stale copy of the logs (a gate killed before) is not this one's.
	for _, f := range []string{"access.log", "cache.log"} {
		os.Remove(filepath.Join(o.Dir, f))
	}
	if err := c.ContainerStart(context.TODO(), g.Name); err != nil {
		return fail(err)
	}
	if err := g.followLogs(); err != nil {
		return fail(fmt.Errorf("follow its logs: %w", err))
	}
	if o.Remote.Ask != nil {
		// Started now, while the probe runs; Open waits for it to listen.
		g.relay = startRelay(c, g.Name, o.Remote.Ask, o.Remote.Logf)
	}
	p, err := g.probeLine(c)
	if err != nil {
		return fail(err)
	}
	g.Port, g.TLSPort = p.Port, p.TLSPort
	caCert, err := writeFilesFor(o, netaddr.HostFrom(p.Addrs), p.Port, p.TLSPort, tokens)
	if err != nil {
		return fail(err)
	}
	if len(o.Credentials) > 0 {
		g.caCert = caCert
	}
	if err := copyGateDir(c, g.Name, o.Dir); err != nil {
		return fail(err)
	}
	return g, nil
}

// streamed are the files squid writes to its stdout and stderr on a remote
// gate, which aisb writes from the logs: never copied in.
var streamed = map[string]bool{"access.log": true, "cache.log": true, "squid.pid": true}

// copyGateDir copies the gate's directory dir (squid.conf, the TLS files)
// into the created gate at dirInContainer, owned by squid's proxy user and
// with their modes, by one archive.
func copyGateDir(c engine.Engine, name, dir string) error {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	base := strings.TrimPrefix(dirInContainer, "/")
	if err := tw.WriteHeader(&tar.Header{Name: base + "/", Mode: 0o700, Typeflag: tar.TypeDir, Uid: proxyUID, Gid: proxyUID, ModTime: time.Now()}); err != nil {
		return err
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if streamed[rel] {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: base + "/" + filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), Uid: proxyUID, Gid: proxyUID, ModTime: fi.ModTime()}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			content, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(content))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err = tw.Write(content)
			return err
		}
		return fmt.Errorf("the gate's directory holds %s, neither a file nor a directory", p)
	})
	if err == nil {
		// The helper's word that the files are there: last.
		err = tw.WriteHeader(&tar.Header{Name: base + "/" + filesReady, Mode: 0o600, Typeflag: tar.TypeReg, Uid: proxyUID, Gid: proxyUID, ModTime: time.Now()})
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return fmt.Errorf("the gate's files: %w", err)
	}
	if err := c.ContainerCopyIn(context.TODO(), name, "/", &b, engine.CopyOptions{KeepOwners: true}); err != nil {
		return fmt.Errorf("copy the gate's files in: %w", err)
	}
	return nil
}

// remoteLogs follows a remote gate's logs into its directory's access.log
// and cache.log from its start; done is closed when the stream has ended
// (the container stopped), err then says why it ended early.
type remoteLogs struct {
	done   chan struct{}
	cancel context.CancelFunc
	err    error
	// out and errs count what the stream wrote of the container's stdout
	// and stderr (killRemote completes the copy from there).
	out, errs counter
	acc       *os.File
	cache     *os.File
}

// counter counts what goes through it to w.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// followLogs starts following the remote gate's logs.
func (g *Gate) followLogs() error {
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(g.Dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	}
	acc, err := open("access.log")
	if err != nil {
		return err
	}
	cache, err := open("cache.log")
	if err != nil {
		acc.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &remoteLogs{done: make(chan struct{}), cancel: cancel, acc: acc, cache: cache}
	l.out.w, l.errs.w = acc, cache
	g.logs = l
	go func() {
		defer close(l.done)
		l.err = g.remote.ContainerLogs(ctx, g.Name, true, &l.out, &l.errs)
	}()
	return nil
}

// closeLogs closes the copies of the logs once their stream has ended.
func (g *Gate) closeLogs() {
	if g.logs == nil {
		return
	}
	select {
	case <-g.logs.done:
		g.logs.acc.Close()
		g.logs.cache.Close()
	default:
	}
}

// logsEnded waits, at most within, for the stream to end: every line squid
// wrote is then in the access log's copy.
func (g *Gate) logsEnded(within time.Duration) error {
	if g.logs == nil {
		return nil
	}
	select {
	case <-g.logs.done:
		if g.logs.err != nil {
			return fmt.Errorf("the gate's access log through the API: %w", g.logs.err)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("the gate's access log through the API did not end within %s", within)
	}
}

// openRemote is Open for a remote gate, started by createRemote: wait
// until squid has checked its TLS port (seen in the copied log).
func (g *Gate) openRemote(c engine.Engine, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		if g.tlsPortChecked() {
			if g.running(c) {
				return g.relayReady(c, time.Until(deadline))
			}
			return errors.Join(fmt.Errorf("start gate: squid exited: %s", g.squidError()), g.Kill(c))
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("start gate: not ready within %s (squid's check of its TLS port was not seen in its log): %s", timeout, g.squidError()), g.Kill(c))
		}
		if i%25 == 24 && !g.running(c) {
			g.logsEnded(time.Second)
			return errors.Join(fmt.Errorf("start gate: squid exited: %s", g.squidError()), g.Kill(c))
		}
		time.Sleep(4 * time.Millisecond)
	}
}

// relayReady waits, at most within, for the gate's question path to
// listen, when it has one: a gate that could not ask would refuse what
// aisb allow admits. On failure the gate is removed.
func (g *Gate) relayReady(c engine.Engine, within time.Duration) error {
	if g.relay == nil {
		return nil
	}
	if err := g.relay.waitReady(max(within, 2*time.Second)); err != nil {
		return errors.Join(fmt.Errorf("start gate: %w", err), g.Kill(c))
	}
	return nil
}

// killRemote kills the remote gate's squid through the API and waits for
// its logs' stream to end (at most within): its access log's copy is then
// complete.
//
// The stream itself ends some 300 ms after the container (the service
// notices the exit late): so once the container has exited, the stream is
// stopped and the logs are asked once more, to their end, and what the
// stream had not yet written is added.
func (g *Gate) killRemote(within time.Duration) bool {
	g.relay.stop()
	_ = g.remote.ContainerKill(context.TODO(), g.Name, "KILL")
	if g.logs == nil {
		return true
	}
	return g.completeLogs(within) == nil
}

// completeLogs waits (at most within) for the remote gate's container to
// have exited, then stops the follow stream, asks the logs once more to
// their end and adds what the stream had not written: the copy is then
// complete.
func (g *Gate) completeLogs(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := g.remote.ContainerWait(ctx, g.Name, define.ContainerStateExited, define.ContainerStateStopped); err != nil {
		return g.logsEnded(within)
	}
	l := g.logs
	l.cancel()
	<-l.done
	var out, errs bytes.Buffer
	if err := g.remote.ContainerLogs(ctx, g.Name, false, &out, &errs); err != nil {
		return fmt.Errorf("the gate's logs through the API: %w", err)
	}
	for _, part := range []struct {
		f    *os.File
		have int64
		all  []byte
	}{{l.acc, l.out.n, out.Bytes()}, {l.cache, l.errs.n, errs.Bytes()}} {
		if int64(len(part.all)) > part.have {
			if _, err := part.f.Write(part.all[part.have:]); err != nil {
				return fmt.Errorf("the copy of the gate's logs: %w", err)
			}
		}
	}
	l.err = nil
	return nil
}

// watchAliveRemote is WatchAlive for a remote gate: the container must run
// (twice in a row not running: lost).
func watchAliveRemote(ctx context.Context, g *Gate, every time.Duration, lost func(error)) {
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if g.running(g.remote) {
			misses = 0
			continue
		}
		if misses++; misses < 2 {
			continue
		}
		lost(fmt.Errorf("%w at %s (its container on the engine no longer runs)", ErrLost, time.Now().Format("15:04:05")))
		<-ctx.Done()
		return
	}
}

// Remote reports whether the gate runs on an engine that is not local.
func (g *Gate) Remote() bool { return g.remote != nil }
