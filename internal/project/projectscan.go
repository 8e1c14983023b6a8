// Package projectscan finds the UNIX socket files in a project tree, within a time budget.
package project

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"
)

// ScanBudget bounds a scan at session start.
const ScanBudget = 2 * time.Second

// MaxSockets is how many socket paths a SocketScan keeps; the count goes on.
const MaxSockets = 100

// SocketScan is what a scan found.
type SocketScan struct {
	Sockets    []string // paths relative to the root, at most MaxSockets
	Count      int      // sockets found, also those beyond MaxSockets
	Entries    int      // directory entries looked at
	Unreadable []string // directories that could not be listed (relative)
	CutShort   bool     // the budget ran out before the walk ended
	Elapsed    time.Duration
}

// Complete reports whether every directory of the tree was listed.
func (r SocketScan) Complete() bool { return !r.CutShort && len(r.Unreadable) == 0 }

// ScanSockets walks root without following symbolic links (a link to a socket, or
// to a directory, is not the project's: the sandbox sees a link, and its
// target outside the project is not mounted) and lists the socket files it
// finds, stopping when budget has passed.
func ScanSockets(root string, budget time.Duration) (SocketScan, error) {
	var r SocketScan
	start := time.Now()
	// The project itself may be reached through a link; Podman mounts
	// its target, so walk that.
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return r, err
	}
	deadline := start.Add(budget)
	errStop := errors.New("budget spent")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			r.Unreadable = append(r.Unreadable, rel(root, path))
			return nil
		}
		r.Entries++
		if r.Entries%256 == 0 && time.Now().After(deadline) {
			r.CutShort = true
			return errStop
		}
		if d.Type()&fs.ModeSocket != 0 {
			r.Count++
			if len(r.Sockets) < MaxSockets {
				r.Sockets = append(r.Sockets, rel(root, path))
			}
		}
		return nil
	})
	r.Elapsed = time.Since(start)
	if err != nil && !errors.Is(err, errStop) {
		return r, err
	}
	return r, nil
}

func rel(root, path string) string {
	if p, err := filepath.Rel(root, path); err == nil {
		return p
	}
	return path
}

// Printable renders a path from the tree for a terminal: quoted, printable
// ASCII only (control characters and non-ASCII are escaped).
func Printable(path string) string { return strconv.QuoteToASCII(path) }
