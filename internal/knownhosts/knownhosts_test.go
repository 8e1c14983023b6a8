package knownhosts

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"

// hashed is what `ssh-keygen -H` writes for name with this salt.
func hashed(salt []byte, name string) string {
	m := hmac.New(sha1.New, salt)
	m.Write([]byte(name))
	return "|1|" + base64.StdEncoding.EncodeToString(salt) + "|" + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func hosts(t *testing.T, entries ...string) []allowlist.Host {
	t.Helper()
	hs, errs := allowlist.Parse(entries)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return hs
}

func TestFilter(t *testing.T) {
	salt := []byte("0123456789abcdefghij")
	file := strings.Join([]string{
		"# comment",
		"",
		"git.example " + key + " plain",
		"other.example,git.example,192.0.2.1 " + key + " list",
		"unlisted.example " + key + " unlisted",
		hashed(salt, "git.example") + " " + key, // hashed, kept
		hashed(salt, "unlisted.example") + " " + key + " hashedother",
		"[git.example]:22 " + key + " port22",
		"[git.example]:2222 " + key + " port2222",
		"git.*,!git.example " + key + " negated",
		"*.example " + key + " wildcard",
		"@revoked git.example " + key + " revoked",
		"@cert-authority *.forge.example " + key + " ca",
		"sub.forge.example " + key + " sub",
		"forge.example.evil " + key + " lookalike",
		"@bogus git.example " + key + " bogus marker",
		"git.example onlytype",
	}, "\n") + "\n"

	res, err := Filter(strings.NewReader(file), hosts(t, "git.example", ".forge.example", "missing.test"))
	if err != nil {
		t.Fatal(err)
	}
	// Kept: plain, list (its other names gone), hashed (as written), port22,
	// wildcard, revoked, ca, sub; comments dropped.
	want := []string{
		"git.example " + key,
		"git.example " + key,
		hashed(salt, "git.example") + " " + key,
		"[git.example]:22 " + key,
		"*.example " + key,
		"@revoked git.example " + key,
		"@cert-authority *.forge.example " + key,
		"sub.forge.example " + key,
	}
	if !slices.Equal(res.Lines, want) {
		t.Errorf("kept\n%s\nwant\n%s", strings.Join(res.Lines, "\n"), strings.Join(want, "\n"))
	}
	if len(res.Missing) != 1 || res.Missing[0].String() != "missing.test" {
		t.Errorf("missing %v", res.Missing)
	}
	if !strings.HasSuffix(string(res.Bytes()), "sub.forge.example "+key+"\n") {
		t.Errorf("Bytes: %q", res.Bytes())
	}
}

// TestHashedFromSSHKeygen: a line ssh-keygen -H wrote on a real host.
func TestHashedFromSSHKeygen(t *testing.T) {
	line := "|1|AsxPT4q9eYvWvgigRjdLBz15ttc=|AcW6nQpBCCAz/n2XZRce+oHvm4E= " + key
	res, _ := Filter(strings.NewReader(line), hosts(t, "git.example"))
	if len(res.Lines) != 1 {
		t.Errorf("ssh-keygen's hashed line for git.example not matched")
	}
	res, _ = Filter(strings.NewReader(line), hosts(t, "git.example.org"))
	if len(res.Lines) != 0 {
		t.Errorf("hashed line matched another name")
	}
}

func TestFilterEmpty(t *testing.T) {
	res, err := Filter(strings.NewReader(""), hosts(t, "git.example"))
	if err != nil || len(res.Lines) != 0 || len(res.Missing) != 1 || res.Bytes() != nil {
		t.Errorf("%+v %v", res, err)
	}
}

// TestFilterNamesNoOtherHost: a line that pins a listed host together with
// the user's other hosts (ssh writes "name,address"; users join aliases)
// reaches the sandbox with the listed host's patterns only, and without its
// comment: the sandbox learns nothing about the user's other hosts.
func TestFilterNamesNoOtherHost(t *testing.T) {
	file := strings.Join([]string{
		"build.internal.corp,git.example,10.1.2.3 " + key + " alice@laptop",
		"@cert-authority *.forge.example,*.internal.corp " + key + " corp-ca",
		"*.example,!secret.example,!vault.internal.corp " + key,
		"[git.example]:22,[db.internal.corp]:5432 " + key,
	}, "\n") + "\n"
	res, err := Filter(strings.NewReader(file), hosts(t, "git.example", ".forge.example"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(res.Bytes())
	for _, leak := range []string{"internal.corp", "10.1.2.3", "alice@laptop", "corp-ca"} {
		if strings.Contains(got, leak) {
			t.Errorf("the sandbox's known_hosts names %q:\n%s", leak, got)
		}
	}
	want := strings.Join([]string{
		"git.example " + key,
		"@cert-authority *.forge.example " + key,
		"*.example " + key,
		"[git.example]:22 " + key,
	}, "\n") + "\n"
	if got != want {
		t.Errorf("kept\n%s\nwant\n%s", got, want)
	}
}
