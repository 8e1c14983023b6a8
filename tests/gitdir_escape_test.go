package tests

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestGitFileCannotMountHostDirs: the agent writes the project's .git file
// (the project is writable); on the next aisb run that file must not make
// aisb mount a host directory that is not the project's git directory, such
// as one holding the user's keys. Control: the directory and its key are
// there and readable on the host.
func TestGitFileCannotMountHostDirs(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, "")
	keys := filepath.Join(a.config, "keys") // a directory of the user's, outside the project
	const secret = "KEY-8f3a1c-not-for-the-sandbox"
	writeUserFile(t, filepath.Join(keys, "id_ed25519"), secret+"\n")
	if got := userRun(t, "cat", filepath.Join(keys, "id_ed25519")); !strings.Contains(got, secret) {
		t.Fatalf("control: the key is not readable on the host: %q", got)
	}

	plant := "printf 'gitdir: " + keys + "\\n' > /project/.git && echo PLANTED"
	r := a.run(t, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c", plant)
	if r.Code != 0 || !strings.Contains(r.Stdout, "PLANTED") {
		t.Fatalf("the agent's write of .git: %s", r)
	}
	read := "cat " + filepath.Join(keys, "id_ed25519") + " 2>&1; echo bye > " + filepath.Join(keys, "written") + " 2>&1; echo DONE"
	r = a.run(t, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c", read)
	if strings.Contains(r.Stdout, secret) {
		t.Fatalf("the sandbox read a key through a planted .git file: %s", r)
	}
	if strings.Contains(r.Stdout, "DONE") || r.Code == 0 {
		t.Errorf("aisb ran the sandbox with a .git file naming a foreign directory: %s", r)
	}
	if !strings.Contains(r.Stderr, "belongs to the project") {
		t.Errorf("the refusal does not say why: %s", r.Stderr)
	}
}
