package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPUsThatRoundToNothing: a CPU limit whose quota rounds to 0 (or below
// the kernel's 1 ms minimum) means no limit at all to the runtime; it is
// refused from the user's file, an untrusted project file and the flag.
func TestCPUsThatRoundToNothing(t *testing.T) {
	for _, v := range []string{"0.000001", "0.000004", "0.009"} {
		f, err := Parse("config.toml", []byte("version = 1\n[limits]\ncpus = "+v+"\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "config.toml: limits.cpus: ") || !strings.Contains(err.Error(), "0.01") {
			t.Errorf("user file cpus = %s: %v %+v", v, err, f)
		}

		dir := t.TempDir()
		src := Sources{UserFile: filepath.Join(dir, "user.toml"), ProjectDir: dir, TrustFile: filepath.Join(dir, "trusted")}
		writeFile(t, src.UserFile, "version = 1\n[limits]\ncpus = 2\n")
		writeFile(t, filepath.Join(dir, ProjectFileName), "version = 1\n[limits]\ncpus = "+v+"\n")
		r, err := Resolve(src)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), ".aisb.toml: limits.cpus: ") {
			t.Errorf("project file cpus = %s: %v %+v", v, err, r)
		}
	}
	for _, v := range []float64{0.000001, 0.000004, 0.009} {
		r := &Resolved{Config: Default()}
		if err := r.Apply(Overrides{CPUs: v}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "command line: --cpus: ") || !strings.Contains(err.Error(), "0.01") {
			t.Errorf("--cpus %g: %v (limits %+v)", v, err, r.Config.Limits)
		}
	}
	// The minimum itself and ordinary values are accepted.
	for _, v := range []string{"0.01", "0.5", "2"} {
		if _, err := Parse("config.toml", []byte("version = 1\n[limits]\ncpus = "+v+"\n")); err != nil {
			t.Errorf("cpus = %s refused: %v", v, err)
		}
	}
	if err := (&Resolved{Config: Default()}).Apply(Overrides{CPUs: 0.01}); err != nil {
		t.Errorf("--cpus 0.01 refused: %v", err)
	}
}
