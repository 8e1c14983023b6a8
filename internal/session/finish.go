package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

// The end of a session with a gate of its own is split: aisb returns to the
// user once the sandbox is gone, and the session's watchdog finishes the
// gate. It converts what the gate logs last (a tunnel the sandbox had open
// is logged when squid sees it close) into the audit, then kills and
// removes the gate. Until the audit is complete, a marker beside it says so
// (audit.MarkFinishing), which `aisb audit` heeds.

// handoff is what aisb leaves its watchdog: written to the session's
// directory, which is aisb's own (squid can write only its gate/
// subdirectory).
type handoff struct {
	Port       int    `json:"port"`
	TLSPort    int    `json:"tls_port"`
	Squid      string `json:"squid"`  // the gate's squid, "PID:STARTTIME"
	Offset     int64  `json:"offset"` // how far aisb converted the access log
	SessionMax int64  `json:"session_max"`
}

const handoffName = "finish.json"

// finishYield bounds how long a watchdog lets starting sessions go first.
const finishYield = 500 * time.Millisecond

// handOff converts what the gate logged so far and hands the rest to the
// watchdog, the gate's secrets included (it removes them once squid is
// gone); where that fails, it finishes the gate itself and reports that it
// did not hand it off.
func handOff(ctx context.Context, c engine.Engine, o Options, id string, g *gate.Gate, follower *audit.Follower, wd *reaper.Watchdog, trace func(string)) (handedOff bool, err error) {
	offset, ferr := follower.Handoff()
	if ferr != nil {
		ferr = fmt.Errorf("the audit of session %s is incomplete: %w", id, ferr)
	}
	auditDir := o.Paths.AuditDir()
	sessionMax, _ := o.Config.Config.Logs.Bytes()
	h := handoff{Port: g.Port, TLSPort: g.TLSPort, Squid: g.Squid(), Offset: offset, SessionMax: sessionMax}
	b, _ := json.Marshal(h)
	err = safefile.Write(filepath.Join(o.Paths.SessionDir(id), handoffName), b, 0o600)
	if err == nil {
		err = audit.MarkFinishing(auditDir, id, wd.Owner())
	}
	if err == nil {
		err = wd.Finish()
	}
	if err == nil {
		trace("gate handed to the watchdog")
		return true, ferr
	}
	o.Logf("%v; finishing the gate before returning", err)
	aerr := finishAudit(ctx, g, auditDir, h, func() {}, o.Logf)
	err = errors.Join(audit.FinishedAudit(auditDir, id, aerr), g.Kill(c))
	trace("gate removed")
	if aerr != nil {
		err = errors.Join(err, fmt.Errorf("the audit of session %s is incomplete: %w", id, aerr))
	}
	return false, errors.Join(ferr, err)
}

// finishAudit converts the gate's last lines from where aisb stopped: once
// the gate has logged all it will (gate.Quiesce) and yield has returned (a
// watchdog's: until no session is starting, at most finishYield), squid is killed, so that
// nothing can be logged after the audit is closed, and what is left is
// converted. Without squid's process (it was not seen), it is converted
// once the log is quiet, and killed by Podman afterwards.
func finishAudit(ctx context.Context, g *gate.Gate, auditDir string, h handoff, yield func(), logf func(string, ...any)) error {
	a, err := audit.OpenAudit(auditDir, g.Session, audit.AuditLimits{Session: h.SessionMax})
	if err != nil {
		return err
	}
	follower := gate.StartFollow(ctx, g, a, h.Offset, logf)
	g.Quiesce(time.Second)
	yield()
	g.KillSquid(time.Second)
	return errors.Join(follower.Stop(), a.Close())
}

// Finish is the watchdog's end of session id after aisb handed it over:
// the audit is completed and squid killed, the gate's secrets (its
// squid.conf with the credentials' values, the session CA's key) removed,
// the audit marked complete, then the gate (and the exited sandbox, which aisb
// leaves to the watchdog) removed. What fails is recorded where `aisb audit` finds it.
func Finish(ctx context.Context, where engine.Where, paths state.Paths, id string, logf func(string, ...any)) error {
	auditDir := paths.AuditDir()
	dir := paths.SessionDir(id)
	var h handoff
	b, err := safefile.Read(filepath.Join(dir, handoffName), 4096)
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err != nil {
		err = fmt.Errorf("read what the session handed over: %w", err)
	} else {
		var g *gate.Gate
		g, err = gate.Running(gate.Known{Session: id, Dir: gateDir(dir), Port: h.Port, TLSPort: h.TLSPort, Squid: h.Squid})
		if err == nil {
			// A session starting meanwhile goes first: squid's end and
			// the removals below cost Podman's locks and a few tenths of
			// a second of CPU. Waiting here, once squid is quiet, also
			// catches the session started right after this one's aisb
			// returned.
			err = finishAudit(ctx, g, auditDir, h, func() { paths.WaitNoStart(finishYield) }, logf)
		}
	}
	// squid is gone (or, not seen, about to be): its secrets go before the
	// audit is marked complete, so a complete audit means they are gone.
	errs := []error{gate.RemoveSecrets(gateDir(dir))}
	errs = append(errs, audit.FinishedAudit(auditDir, id, err), err)
	errs = append(errs, reaper.Remove(where, []string{gate.ContainerName(id), sandbox.ContainerName(id)}))
	// The helper's copy, which aisb left to squid (steer.stop).
	os.RemoveAll(helperDir(dir))
	return errors.Join(errs...)
}

// HandedOff reports whether session id's aisb handed its end over, also
// when it died before it could say so to the watchdog.
func HandedOff(paths state.Paths, id string) bool {
	_, err := os.Lstat(filepath.Join(paths.SessionDir(id), handoffName))
	return err == nil
}

// ErrKilled is recorded for the audit of a session whose aisb died before
// the session's end: its follower died with it, and the gate's decisions
// from its last moments may be missing.
var ErrKilled = errors.New("the session's aisb ended without finishing (killed?); its gate's last decisions may be missing")

// Abandoned is the watchdog's end of session id when its aisb died without
// a word: a session audit is marked as possibly incomplete, which `aisb
// audit` says; the sandbox is stopped, then the gate removed and its
// secrets with it (the rest needs neither, and may take long); the agent's changes in a remote
// engine's copy of the project are brought into the review's layer
// (rescueCopy); then the sandbox and the copy are removed. Where the
// changes could not be brought back, the stopped sandbox is kept, with
// the copy (keep).
func Abandoned(where engine.Where, paths state.Paths, id string) error {
	var errs []error
	if _, err := os.Lstat(filepath.Join(paths.AuditDir(), id+".jsonl")); err == nil {
		errs = append(errs, audit.FinishedAudit(paths.AuditDir(), id, ErrKilled))
	}
	// The sandbox stops first: its table sends everything to the gate's
	// port, which nothing may take over once the gate is gone.
	errs = append(errs, reaper.Kill(where, sandbox.ContainerName(id)))
	errs = append(errs, reaper.Remove(where, []string{gate.ContainerName(id), sandbox.PathCheckName(id)}))
	// Also when Podman could not be reached: the keys do not outlive aisb.
	errs = append(errs, gate.RemoveSecrets(gateDir(paths.SessionDir(id))))
	os.RemoveAll(helperDir(paths.SessionDir(id)))
	// The check of whether a remote engine sees the project, cut short.
	if dir, err := paths.SessionProject(id); err == nil {
		errs = append(errs, sandbox.RemovePathMarkers(dir, id))
	}
	keep, err := rescueCopy(where, paths, id)
	errs = append(errs, err)
	if keep {
		// The copy is read through its sandbox (stopped above): both stay.
		return errors.Join(errs...)
	}
	errs = append(errs, reaper.Remove(where, []string{sandbox.ContainerName(id)}))
	// A remote engine's copy of the project (remote.go): none elsewhere.
	errs = append(errs, reaper.RemoveVolumes(where, []string{ProjectVolume(id)}))
	return errors.Join(errs...)
}
