package knownhosts

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/allowlist"
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
	var got []string
	for _, l := range res.Lines {
		f := strings.Fields(l)
		got = append(got, f[len(f)-1])
	}
	want := []string{"plain", "list", key[len(key)-8:], "port22", "wildcard", "revoked", "ca", "sub"}
	// The hashed line has no comment: its last field is the key.
	want[2] = strings.Fields(key)[1]
	if !slices.Equal(got, want) {
		t.Errorf("kept %q\nwant %q", got, want)
	}
	if len(res.Missing) != 1 || res.Missing[0].String() != "missing.test" {
		t.Errorf("missing %v", res.Missing)
	}
	if !strings.HasSuffix(string(res.Bytes()), " sub\n") {
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
