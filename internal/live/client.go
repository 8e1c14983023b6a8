package live

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// Change asks a session's control socket to allow or deny host; the reply
// carries the allowlist in force afterwards.
func Change(socket, op, host string) (Reply, error) {
	c, err := dial(socket)
	if err != nil {
		return Reply{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := writeJSON(c, Request{Op: op, Host: host}); err != nil {
		return Reply{}, fmt.Errorf("session control: %w", err)
	}
	var rep Reply
	line, err := readLine(bufio.NewReader(c))
	if err != nil {
		return Reply{}, fmt.Errorf("session control: no reply: %w", err)
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return Reply{}, fmt.Errorf("session control: %w", err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("%w: %s", ErrRefused, rep.Error)
	}
	return rep, nil
}

func dial(socket string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("session control: %w (has the session ended?)", err)
	}
	return c, nil
}

// Watch is an open aisb watch connection.
type Watch struct {
	c         *net.UnixConn
	r         *bufio.Reader
	Allowlist []string // in force when the watch began
}

// OpenWatch attaches as a watcher: from now on the session asks here.
func OpenWatch(socket string) (*Watch, error) {
	c, err := dial(socket)
	if err != nil {
		return nil, err
	}
	w := &Watch{c: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := writeJSON(c, Request{Op: OpWatch}); err != nil {
		c.Close()
		return nil, fmt.Errorf("session control: %w", err)
	}
	line, err := readLine(w.r)
	var rep Reply
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err == nil && rep.Error != "" {
		err = fmt.Errorf("%w: %s", ErrRefused, rep.Error)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("session control: %w", err)
	}
	c.SetDeadline(time.Time{})
	w.Allowlist = rep.Allowlist
	return w, nil
}

// Next waits for the next message; an error means the session ended.
func (w *Watch) Next() (Message, error) {
	line, err := readLine(w.r)
	if err != nil {
		return Message{}, err
	}
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		return Message{}, fmt.Errorf("session control: %w", err)
	}
	m.Host = printable(m.Host)
	return m, nil
}

// Answer answers prompt id with AnswerOnce, AnswerSession or AnswerDeny.
func (w *Watch) Answer(id int, answer string) error {
	w.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return writeJSON(w.c, Request{Op: OpAnswer, Prompt: id, Answer: answer})
}

// Close detaches the watcher.
func (w *Watch) Close() error { return w.c.Close() }
