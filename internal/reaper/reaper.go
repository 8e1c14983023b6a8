// Package reaper removes what a session left behind when its aisb process died: a watchdog per session, and a sweep by every command.
package reaper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
)

// Watchdog is a session's watchdog: a detached process that removes the
// session's containers if aisb dies without doing so (SIGKILL, crash), and
// that finishes the session's gate when aisb hands it over (Finish). aisb
// talks to it through its standard input, which closes with aisb whatever
// the way aisb ends.
type Watchdog struct {
	w      *os.File
	owner  string
	closed bool
	sayErr error // the first word's failure
}

// The messages on a watchdog's standard input.
const (
	msgFinish = "finish"
	msgRemove = "remove"
	msgStop   = "stop"
)

// StartWatchdog starts the watchdog (argv, plus --owner and --session).
func StartWatchdog(argv []string, owner, session string) (*Watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the session's watchdog: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(argv[0], append(argv[1:], "--owner", owner, "--session", session)...)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the session's watchdog: %w", err)
	}
	go cmd.Wait()
	return &Watchdog{w: w, owner: state.OwnerOf(cmd.Process.Pid)}, nil
}

// Owner identifies the watchdog process ("PID:STARTTIME", see state.Owner);
// "" for none (a nil Watchdog).
func (w *Watchdog) Owner() string {
	if w == nil {
		return ""
	}
	return w.owner
}

// Finish hands the rest of the session's end to the watchdog, which goes on
// after aisb exits; what to finish the caller has written beforehand.
func (w *Watchdog) Finish() error { return w.say(msgFinish) }

// RemoveSandbox hands the removal of the session's exited sandbox (a
// session without a gate of its own) to the watchdog, which goes on after
// aisb exits.
func (w *Watchdog) RemoveSandbox() error { return w.say(msgRemove) }

// Stop ends the watchdog when the session ended the normal way and left
// nothing to finish; after Finish or RemoveSandbox it does nothing.
func (w *Watchdog) Stop() { _ = w.say(msgStop) }

// say says msg, the only word the watchdog hears; after that, say does
// nothing, unless saying it failed: then the watchdog heard nothing (or
// not for sure), and every later word fails too.
func (w *Watchdog) say(msg string) error {
	if w.closed {
		return w.sayErr
	}
	w.closed = true
	_, err := w.w.WriteString(msg + "\n")
	if cerr := w.w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		w.sayErr = fmt.Errorf("tell the session's watchdog to %s: %w", msg, err)
	}
	return w.sayErr
}

// Wake is why Wait returned.
type Wake int

const (
	Stopped       Wake = iota // the session ended and left nothing to do
	Finish                    // the session handed its end over (Watchdog.Finish)
	RemoveSandbox             // the session left its exited sandbox to remove (Watchdog.RemoveSandbox)
	OwnerGone                 // the session's aisb is gone without a word
)

// Wait is the watchdog's loop, reading what aisb says on in (the
// watchdog's standard input): it returns at aisb's word, or once aisb is
// gone without one.
func Wait(in io.Reader, owner string) Wake {
	said := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(in)
		msg := ""
		if sc.Scan() {
			msg = sc.Text()
		}
		said <- msg
	}()
	every := 500 * time.Millisecond
	for state.OwnerAlive(owner) {
		select {
		case msg := <-said:
			if w, ok := wakeFor(msg); ok {
				return w
			}
			// Closed without a word: aisb is gone, or about to be.
			said, every = nil, 20*time.Millisecond
		case <-time.After(every):
		}
	}
	// A word said just before aisb exited still counts: the pipe has it,
	// or says end of file, at once (nothing else holds its other end).
	if said != nil {
		select {
		case msg := <-said:
			if w, ok := wakeFor(msg); ok {
				return w
			}
		case <-time.After(2 * time.Second):
		}
	}
	return OwnerGone
}

// wakeFor is what a word of aisb's means; false for none (end of file).
func wakeFor(msg string) (Wake, bool) {
	switch msg {
	case msgFinish:
		return Finish, true
	case msgRemove:
		return RemoveSandbox, true
	case msgStop:
		return Stopped, true
	}
	return 0, false
}

// Remove removes the named containers of a session whose aisb is gone.
func Remove(where engine.Where, names []string) error {
	c, err := engine.Connect(context.Background(), where)
	if err != nil {
		return err
	}
	defer c.Close()
	var errs []error
	for _, n := range names {
		errs = append(errs, engine.Remove(context.TODO(), c, n))
	}
	return errors.Join(errs...)
}

// Kill stops the named container of a session whose aisb is gone, without
// removing it (a missing or stopped one is no error).
func Kill(where engine.Where, name string) error {
	c, err := engine.Connect(context.Background(), where)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.ContainerKill(context.TODO(), name, "KILL"); err != nil && !engine.IsNotFound(err) {
		if in, ierr := c.ContainerInspect(context.TODO(), name); ierr == nil && in.State != nil && !in.State.Running {
			return nil
		}
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// RemoveVolumes removes the named volumes (a missing one is no error),
// after their containers: a session's on an engine that is not local.
func RemoveVolumes(where engine.Where, names []string) error {
	c, err := engine.Connect(context.Background(), where)
	if err != nil {
		return err
	}
	defer c.Close()
	var errs []error
	for _, n := range names {
		if err := c.VolumeRemove(context.TODO(), n); err != nil && !engine.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove volume %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// Reap removes containers whose owning aisb process is gone: the path that
// catches what a killed session and its watchdog both left behind. A
// container whose session's watchdog still runs is its watchdog's to remove.
func Reap(c engine.Engine, logf func(string, ...any)) {
	list, err := owned(c)
	if err != nil {
		logf("reap: %v", err)
		return
	}
	for name, o := range list {
		if !state.OwnerAlive(o.owner) && (o.finisher == "" || !state.OwnerAlive(o.finisher)) {
			logf("removing %s, left by a session that ended without cleaning up", name)
			if err := engine.Remove(context.TODO(), c, name); err != nil {
				logf("reap: %v", err)
			}
		}
	}
}

type owners struct{ owner, finisher string }

// owned maps the names of aisb's session containers to their owners.
func owned(c engine.Engine) (map[string]owners, error) {
	list, err := c.ContainerList(context.TODO(), map[string][]string{"label": {engine.LabelOwner}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := map[string]owners{}
	for _, ctr := range list {
		if len(ctr.Names) > 0 {
			out[ctr.Names[0]] = owners{ctr.Labels[engine.LabelOwner], ctr.Labels[engine.LabelFinisher]}
		}
	}
	return out, nil
}
