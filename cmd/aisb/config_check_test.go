package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runAisb(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if dir != "" {
		t.Chdir(dir)
	}
	var out, errb bytes.Buffer
	code = run(append([]string{"aisb"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestConfigCheckExitCodes(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("version = 1\n[network]\nallowed_hosts = [\".github.com\", \"192.0.2.1\"]\n"), 0o644)
	if code, out, errs := runAisb(t, "", "config", "check", good); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("valid file: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, entry := range []string{"https://x.example", "x.example:443", "x.example/p", "*.x.example", "X.example", "ü.example",
		"a b.example", "", ".", "::1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "127.1"} {
		bad := filepath.Join(dir, "bad.toml")
		os.WriteFile(bad, []byte("version = 1\n[network]\nallowed_hosts = [\"ok.example\", "+quote(entry)+"]\n"), 0o644)
		code, _, errs := runAisb(t, "", "config", "check", bad)
		if code != 78 || !strings.HasPrefix(errs, bad+": network.allowed_hosts[1]: ") {
			t.Errorf("entry %q: exit %d, stderr %q", entry, code, errs)
		}
	}
	for _, list := range []string{`["a.example", "a.example"]`, `[".example.com", "api.example.com"]`} {
		bad := filepath.Join(dir, "bad.toml")
		os.WriteFile(bad, []byte("version = 1\n[network]\nallowed_hosts = "+list+"\n"), 0o644)
		if code, _, errs := runAisb(t, "", "config", "check", bad); code != 78 || !strings.Contains(errs, "network.allowed_hosts[1]") {
			t.Errorf("list %s: exit %d, stderr %q", list, code, errs)
		}
	}
	if code, _, errs := runAisb(t, "", "config", "check", filepath.Join(dir, "missing.toml")); code != 78 || !strings.Contains(errs, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q", code, errs)
	}
}

func quote(s string) string {
	b := new(bytes.Buffer)
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

func TestTrustLiftsNarrowing(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	os.MkdirAll(filepath.Join(cfg, "aisb"), 0o755)
	os.WriteFile(filepath.Join(cfg, "aisb", "config.toml"), []byte("version = 1\n"), 0o644)
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), []byte("version = 1\n[network]\nallowed_hosts = [\"evil.example\"]\n"), 0o644)

	code, out, errs := runAisb(t, proj, "config", "check")
	if code != 0 || !strings.Contains(errs, `"evil.example" ignored`) || strings.Contains(out, "allow evil.example") {
		t.Fatalf("untrusted: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	sum := sha256.Sum256([]byte("version = 1\n[network]\nallowed_hosts = [\"evil.example\"]\n"))
	if code, _, errs := runAisb(t, proj, "trust", "--sha256", hex.EncodeToString(sum[:])); code != 0 {
		t.Fatalf("trust: exit %d, %s", code, errs)
	}
	code, out, errs = runAisb(t, proj, "config", "check")
	if code != 0 || strings.Contains(errs, "ignored") || !strings.Contains(out, "  allow evil.example\n") {
		t.Fatalf("trusted: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
