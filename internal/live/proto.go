// Package live steers a running session: it answers the gate's helper for
// names the gate does not list (allowed live, or asked of a watcher) and
// serves the session's control socket (aisb allow, deny and watch).
package live

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Control operations.
const (
	OpAllow  = "allow"
	OpDeny   = "deny"
	OpWatch  = "watch"
	OpAnswer = "answer"
)

// Answers to a prompt, and the outcomes of one that got none.
const (
	AnswerOnce       = "once"       // admit the requests waiting now, ask again next time
	AnswerSession    = "session"    // allow the name for the rest of the session
	AnswerDeny       = "deny"       // refuse the requests waiting now
	AnswerTimeout    = "timeout"    // nobody answered in time: refused
	AnswerNoWatcher  = "no_watcher" // nobody was watching: refused at once
	AnswerTooMany    = "too_many"   // too many questions pending: refused at once
	AnswerUnrecorded = "unrecorded" // admitted by the watcher, but the audit could not record it: refused
)

// Request is one line a control client sends.
type Request struct {
	Op     string `json:"op"`
	Host   string `json:"host,omitempty"`
	Prompt int    `json:"prompt,omitempty"`
	Answer string `json:"answer,omitempty"`
}

// Reply answers an allow, deny or watch request.
type Reply struct {
	Error     string   `json:"error,omitempty"`
	Changed   bool     `json:"changed"`
	Allowlist []string `json:"allowlist,omitempty"` // in force after the request
}

// The types of Message.
const (
	MsgPrompt   = "prompt"   // a question, open until its deadline
	MsgResolved = "resolved" // the end of a question, with how it ended
	MsgNotOpen  = "not_open" // this watcher's answer named a question no longer open: not applied
)

// Message is what a watcher receives: a question, the end of one, or the
// refusal of its answer to one that had ended (Answer is what it answered).
type Message struct {
	Type     string    `json:"type"` // MsgPrompt, MsgResolved or MsgNotOpen
	Prompt   int       `json:"prompt"`
	Host     string    `json:"host"`
	Deadline time.Time `json:"deadline,omitempty"`
	Answer   string    `json:"answer,omitempty"`
}

// ErrRefused is the server's refusal of a request, with its reason.
var ErrRefused = errors.New("refused")

// maxLine bounds every line read from a socket.
const maxLine = 4096

// peer is the process at the other end of a UNIX socket, as the kernel says.
type peer struct{ uid, pid int }

func peerOf(c net.Conn) (peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var p peer
	var cerr error
	err = raw.Control(func(fd uintptr) { p, cerr = peerCred(int(fd)) })
	if err != nil {
		return peer{}, err
	}
	if cerr != nil {
		return peer{}, cerr
	}
	return p, nil
}

// listen creates a UNIX socket at path, replacing only a stale socket (never
// a file or symlink someone put there), readable and writable by its owner only.
func listen(path string) (*net.UnixListener, error) {
	if len(path) >= 108 {
		return nil, fmt.Errorf("socket path %s is %d bytes, over the kernel's limit of 107; set XDG_STATE_HOME to a shorter directory", path, len(path))
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen %s: something that is not a socket is in the way; remove it", path)
		}
		os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// The directory is the user's alone already; the mode says so twice.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return ln, nil
}

// readLine reads one newline-terminated line of at most maxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, errors.New("line too long")
		}
		if !isPrefix {
			return line, nil
		}
	}
}

func writeJSON(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}
