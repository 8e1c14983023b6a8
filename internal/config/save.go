package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// ErrCannotEdit is returned when a file cannot be edited without risking
// the rest of it; the message says what to add by hand.
var ErrCannotEdit = errors.New("cannot edit safely")

var (
	tableRE    = regexp.MustCompile(`^\s*\[`)
	networkRE  = regexp.MustCompile(`^\s*\[\s*network\s*\]\s*(#.*)?$`)
	inTableRE  = regexp.MustCompile(`^\s*allowed_hosts\s*=\s*\[`)
	topLevelRE = regexp.MustCompile(`^\s*network\s*\.\s*allowed_hosts\s*=\s*\[`)
)

// SaveAllowedHost adds host to network.allowed_hosts in the user's file at
// path, changing nothing else in it: the array gains one string, or the
// [network] table gains the key, or the file gains the table (or is created).
// The result is parsed again and must decode to the old configuration plus
// the host, or the file is left as it was. It reports false when the file
// already allows host.
func SaveAllowedHost(path, host string) (bool, error) {
	h, err := allowlist.ParseHost(host)
	if err != nil {
		return false, err
	}
	entry := h.String()
	fix := fmt.Sprintf("add %q to network.allowed_hosts in %s yourself", entry, path)
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		content := fmt.Sprintf("version = %d\n\n[network]\nallowed_hosts = [%q]\n", Version, entry)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return false, fmt.Errorf("save to %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return false, fmt.Errorf("save to %s: %w", path, err)
		}
		_, err = f.WriteString(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, fmt.Errorf("save to %s: %w", path, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("save to %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("save to %s: %w: it is not a regular file (a symlink?); %s", path, ErrCannotEdit, fix)
	}
	old, err := ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("save to %s: the file has problems; fix them first: %w", path, err)
	}
	current, _ := allowlist.Parse(old.Config.Network.AllowedHosts)
	if slices.ContainsFunc(current, func(x allowlist.Host) bool { return x.Covers(h) }) {
		return false, nil
	}
	if slices.ContainsFunc(current, func(x allowlist.Host) bool { return h.Covers(x) }) {
		return false, fmt.Errorf("save to %s: %w: %q covers entries already listed, which would make the list invalid; %s and remove the entries it covers", path, ErrCannotEdit, entry, fix)
	}
	edited, ok := insertAllowedHost(string(old.Content), entry)
	if !ok {
		return false, fmt.Errorf("save to %s: %w: network.allowed_hosts is not written as a plain array in [network]; %s", path, ErrCannotEdit, fix)
	}
	again, err := Parse(path, []byte(edited))
	want := old.Config
	want.Network.AllowedHosts = append(slices.Clone(want.Network.AllowedHosts), entry)
	if err != nil || !reflect.DeepEqual(again.Config, want) {
		return false, fmt.Errorf("save to %s: %w: the edit would change more than network.allowed_hosts; %s", path, ErrCannotEdit, fix)
	}
	tmp := path + ".aisb-new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fi.Mode().Perm())
	if err != nil {
		return false, fmt.Errorf("save to %s: %w", path, err)
	}
	_, err = f.WriteString(edited)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("save to %s: %w", path, err)
	}
	return true, nil
}

// insertAllowedHost edits the text; the caller checks the result by parsing.
func insertAllowedHost(content, entry string) (string, bool) {
	lines := strings.SplitAfter(content, "\n")
	offset := func(i int) int {
		n := 0
		for _, l := range lines[:i] {
			n += len(l)
		}
		return n
	}
	inNetwork, beforeTables, header := false, true, -1
	for i, l := range lines {
		if tableRE.MatchString(l) {
			beforeTables = false
			inNetwork = networkRE.MatchString(strings.TrimRight(l, "\r\n"))
			if inNetwork {
				header = i
			}
			continue
		}
		if (inNetwork && inTableRE.MatchString(l)) || (beforeTables && topLevelRE.MatchString(l)) {
			start := offset(i) + strings.Index(l, "[")
			return appendToArray(content, start, entry)
		}
	}
	quoted := fmt.Sprintf("%q", entry)
	if header >= 0 {
		at := offset(header + 1)
		sep := ""
		if !strings.HasSuffix(content[:at], "\n") {
			sep = "\n"
		}
		return content[:at] + sep + "allowed_hosts = [" + quoted + "]\n" + content[at:], true
	}
	sep := "\n"
	if content != "" && !strings.HasSuffix(content, "\n") {
		sep = "\n\n"
	}
	return content + sep + "[network]\nallowed_hosts = [" + quoted + "]\n", true
}

// appendToArray adds entry as the last element of the array whose '[' is at
// start, skipping strings and comments to find its closing bracket.
func appendToArray(content string, start int, entry string) (string, bool) {
	depth, last := 0, -1 // last: the last significant byte inside the array
	for i := start; i < len(content); i++ {
		switch c := content[i]; c {
		case '#':
			for i < len(content) && content[i] != '\n' {
				i++
			}
		case '"', '\'':
			if strings.HasPrefix(content[i:], `"""`) || strings.HasPrefix(content[i:], `'''`) {
				return "", false // multi-line strings: leave to the user
			}
			j := i + 1
			for ; j < len(content) && content[j] != c && content[j] != '\n'; j++ {
				if c == '"' && content[j] == '\\' {
					j++
				}
			}
			if j >= len(content) || content[j] != c {
				return "", false
			}
			i, last = j, j
		case '[':
			depth++
			last = i
		case ']':
			depth--
			if depth == 0 {
				q := fmt.Sprintf("%q", entry)
				switch content[last] {
				case '[':
				case ',':
					q = " " + q
				default:
					q = ", " + q
				}
				return content[:last+1] + q + content[last+1:], true
			}
			last = i
		case ' ', '\t', '\r', '\n':
		default:
			last = i
		}
	}
	return "", false
}
