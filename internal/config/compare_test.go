package config

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestCompareLegacy runs many generated user and project files, trusted or
// not, and command lines through the field table and through the code it
// replaced (legacy_test.go), and wants the same results, the same notices and
// the same problems. Lines are compared as sets: the table orders them by
// field; the exact order is compared and counted apart.
func TestCompareLegacy(t *testing.T) {
	rng := rand.New(rand.NewSource(26))
	dir := t.TempDir()
	user := filepath.Join(dir, "user.toml")
	proj := filepath.Join(dir, "proj")
	if err := os.Mkdir(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	projFile := filepath.Join(proj, ProjectFileName)
	store := filepath.Join(dir, "trust")
	var reordered, n int
	for i := range 2500 {
		for _, p := range []string{user, projFile, store} {
			os.Remove(p)
		}
		var userBody, projBody string
		if rng.Intn(8) != 0 {
			userBody = genFile(rng)
			writeFile(t, user, userBody)
		}
		if rng.Intn(8) != 0 {
			projBody = genFile(rng)
			writeFile(t, projFile, projBody)
		}
		trusted := rng.Intn(3) == 0
		if trusted && projBody != "" {
			if err := Trust(store, projFile, []byte(projBody)); err != nil {
				t.Fatal(err)
			}
		}
		src := Sources{UserFile: user, ProjectDir: proj, TrustFile: store}
		name := fmt.Sprintf("case %d (trusted %v)\nuser:\n%s\nproject:\n%s", i, trusted, userBody, projBody)

		for _, body := range []string{userBody, projBody} {
			nf, nerr := Parse("x.toml", []byte(body))
			of, oerr := legacyParse("x.toml", []byte(body))
			if !sameErr(nerr, oerr) || !reflect.DeepEqual(nf, of) {
				t.Fatalf("%s\nParse: new %+v %v\nold %+v %v", name, nf, nerr, of, oerr)
			}
			if nerr != nil && nerr.Error() != oerr.Error() {
				reordered++
			}
		}

		nr, nerr := Resolve(src)
		or, oerr := legacyResolve(src)
		if !sameErr(nerr, oerr) {
			t.Fatalf("%s\nResolve errors: new %v\nold %v", name, nerr, oerr)
		}
		if nerr != nil {
			continue
		}
		n++
		if !sameResolved(nr, or) {
			t.Fatalf("%s\nResolve: new %+v\nold %+v", name, nr, or)
		}
		if !slices.Equal(nr.Notices, or.Notices) {
			reordered++
		}
		if nr.ProjectFile != nil {
			nw, nerr := Widens(user, nr.ProjectFile)
			ow, oerr := legacyWidens(user, or.ProjectFile)
			if !sameErr(nerr, oerr) || !sameSet(nw, ow) {
				t.Fatalf("%s\nWidens: new %q %v\nold %q %v", name, nw, nerr, ow, oerr)
			}
		}
		for range 3 {
			o := genOverrides(rng)
			a, b := clone(t, src, Resolve), clone(t, src, legacyResolve)
			nerr, oerr := a.Apply(o), b.legacyApply(o)
			if !sameErr(nerr, oerr) {
				t.Fatalf("%s\noverrides %+v\nApply errors: new %v\nold %v", name, o, nerr, oerr)
			}
			if nerr != nil && nerr.Error() != oerr.Error() {
				reordered++
			}
			if nerr == nil && !sameResolved(a, b) {
				t.Fatalf("%s\noverrides %+v\nApply: new %+v\nold %+v", name, o, a, b)
			}
		}
	}
	if n < 800 {
		t.Errorf("only %d cases resolved; the generator makes too many invalid files", n)
	}
	t.Logf("%d cases resolved; %d listings in another order", n, reordered)
}

func clone(t *testing.T, src Sources, resolve func(Sources) (*Resolved, error)) *Resolved {
	t.Helper()
	r, err := resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameErr: both nil, or the same kind of error with the same lines.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var pa, pb Problems
	if errors.As(a, &pa) != errors.As(b, &pb) || errors.Is(a, ErrInvalid) != errors.Is(b, ErrInvalid) {
		return false
	}
	return sameSet(strings.Split(a.Error(), "\n"), strings.Split(b.Error(), "\n"))
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func sameResolved(a, b *Resolved) bool {
	return reflect.DeepEqual(a.Config, b.Config) && reflect.DeepEqual(a.Allowlist, b.Allowlist) &&
		reflect.DeepEqual(a.SSHHosts, b.SSHHosts) && reflect.DeepEqual(a.HarnessHosts, b.HarnessHosts) &&
		reflect.DeepEqual(a.ProjectFile, b.ProjectFile) && sameSet(a.Notices, b.Notices)
}

// genKeys are, per table, the lines a generated file may hold for each key.
var genKeys = []struct {
	table string
	keys  [][]string
}{
	{"network", [][]string{
		{`mode = "none"`, `mode = "allow"`, `mode = "no-gate"`, `mode = "open"`, `mode = "bogus"`},
		{`allowed_hosts = ["api.github.com"]`, `allowed_hosts = [".github.com", "evil.example"]`, `allowed_hosts = ["10.0.0.0/8", "192.0.2.1"]`, `allowed_hosts = []`, `allowed_hosts = ["a b"]`, `allowed_hosts = ["x.github.com", "10.1.2.3"]`},
		{`ssh_hosts = ["github.com"]`, `ssh_hosts = ["github.com", "evil.example"]`, `ssh_hosts = []`, `ssh_hosts = ["a b"]`, `ssh_hosts = [".example.org"]`},
		{`host_ports = [8080]`, `host_ports = [22, 8080]`, `host_ports = [0]`, `host_ports = [22, 22]`, `host_ports = []`},
		{`dns = ["192.0.2.53"]`, `dns = []`, `dns = ["x"]`},
		{`ask = true`, `ask = false`},
		{`ask_timeout = 10`, `ask_timeout = 60`, `ask_timeout = 30`, `ask_timeout = 0`, `ask_timeout = 1000`},
		{`upstream_ca = ["/etc/ca.pem"]`, `upstream_ca = []`, `upstream_ca = ["rel.pem"]`},
	}},
	{"env", [][]string{
		{`pass = ["FOO"]`, `pass = ["FOO", "BAR"]`, `pass = ["1X"]`, `pass = ["HOME"]`, `pass = ["KEY"]`, `pass = []`, `pass = ["BAR", "BAR"]`},
		{`set = { A = "1" }`, `set = {}`, `set = { "bad name" = "x", B = "2" }`, `set = { KEY = "v" }`, "set = { C = \"a\\u0000b\" }"},
	}},
	{"limits", [][]string{
		{`pids = 10`, `pids = 100`, `pids = -1`, `pids = 0`},
		{`memory = "1g"`, `memory = "512m"`, `memory = "bad"`, `memory = "2g"`},
		{`cpus = 0.5`, `cpus = 2.0`, `cpus = 0.001`, `cpus = -1.0`, `cpus = 0.0`},
	}},
	{"sandbox", [][]string{
		{`harness = "pi"`, `harness = "claude"`, `harness = "nope"`},
		{`base_image = "docker.io/library/debian:trixie-slim"`, `base_image = "other:1"`, `base_image = ""`},
		{`ssh_agent = true`, `ssh_agent = false`},
		{`state = "none"`, `state = "project"`, `state = "harness"`, `state = "all"`},
	}},
	{"logs", [][]string{
		{`session_max = "64m"`, `session_max = "128m"`, `session_max = "1k"`, `session_max = "bad"`},
		{`total_max = "1g"`, `total_max = "512m"`, `total_max = "2k"`},
	}},
}

// genFile is a configuration file: mostly valid, each key present or not.
func genFile(rng *rand.Rand) string {
	var b strings.Builder
	switch rng.Intn(40) {
	case 0:
	case 1:
		b.WriteString("version = 2\n")
	default:
		b.WriteString("version = 1\n")
	}
	if rng.Intn(100) == 0 {
		b.WriteString("bogus = 1\n")
	}
	for _, tb := range genKeys {
		var lines []string
		for _, opts := range tb.keys {
			if rng.Intn(3) == 0 {
				// The first two options of each key are valid; most
				// files stay valid.
				k := rng.Intn(2)
				if rng.Intn(6) == 0 {
					k = rng.Intn(len(opts))
				}
				lines = append(lines, opts[k])
			}
		}
		if rng.Intn(150) == 0 {
			lines = append(lines, "unknown_key = 1")
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "[%s]\n%s\n", tb.table, strings.Join(lines, "\n"))
		}
	}
	switch rng.Intn(30) {
	case 0:
		b.WriteString("[[credentials]]\nhost = \"api.example.com\"\nheader = \"x-api-key\"\nenv = \"KEY\"\n")
	case 1:
		b.WriteString("[[credentials]]\nhost = \".example.com\"\nheader = \"x-api-key\"\nenv = \"KEY\"\n")
	}
	return b.String()
}

func pick[T any](rng *rand.Rand, opts ...T) T { return opts[rng.Intn(len(opts))] }

// genOverrides is a command line: mostly empty flags, some bad.
func genOverrides(rng *rand.Rand) Overrides {
	none := func() bool { return rng.Intn(3) != 0 }
	var o Overrides
	if !none() {
		o.Mode = pick(rng, "none", "allow", "open", "bad")
	}
	if !none() {
		o.Allow = pick(rng, []string{"x.example"}, []string{".github.com", "10.0.0.1"}, []string{"bad host"})
	}
	if !none() {
		o.AllowSSH = pick(rng, []string{"github.com"}, []string{"a b"})
	}
	o.SSHAgent = rng.Intn(4) == 0
	if !none() {
		o.HostPorts = pick(rng, []int{8080}, []int{22, 9000}, []int{0})
	}
	if !none() {
		o.Env = pick(rng, []string{"FOO"}, []string{"A=1", "FOO"}, []string{"1X"}, []string{"HOME=x"}, []string{"KEY"}, []string{"ANTHROPIC_API_KEY=x"})
	}
	if !none() {
		o.Harness = pick(rng, "pi", "claude", "nope")
	}
	if !none() {
		o.BaseImage = pick(rng, "other:2", DefaultBaseImage)
	}
	if !none() {
		o.Pids = pick(rng, 5, -1, 1000)
	}
	if !none() {
		o.Memory = pick(rng, "1g", "bad", "64m")
	}
	if !none() {
		o.CPUs = pick(rng, 1.0, -1, 0.001, 4)
	}
	o.Ask = rng.Intn(4) == 0
	if !none() {
		o.State = pick(rng, "none", "harness", "bad")
	}
	if !none() {
		o.Credentials = pick(rng, []string{"KEY"}, []string{"ANTHROPIC_API_KEY"}, []string{"UNKNOWN_X"}, []string{"1bad"})
	}
	return o
}

// TestNarrowRulesLegacy: the previous code gives what TestNarrowRules wants,
// lines compared as sets.
func TestNarrowRulesLegacy(t *testing.T) {
	sorted := func(resolve func(Sources) (*Resolved, error)) func(Sources) (*Resolved, error) {
		return func(src Sources) (*Resolved, error) {
			r, err := resolve(src)
			if r != nil {
				slices.Sort(r.Notices)
			}
			return r, err
		}
	}
	for _, c := range narrowCases {
		c.notices = slices.Clone(c.notices)
		slices.Sort(c.notices)
		if msg := runNarrowCase(t, c, sorted(legacyResolve)); msg != "" {
			t.Errorf("project %q (trusted %v): %s", c.project, c.trusted, msg)
		}
	}
}

// TestApplyRulesLegacy: the previous Apply gives what TestApplyRules wants,
// problems compared as sets.
func TestApplyRulesLegacy(t *testing.T) {
	for _, c := range applyCases {
		wantErr := slices.Clone(c.err)
		slices.Sort(wantErr)
		apply := func(r *Resolved, o Overrides) error {
			err := r.legacyApply(o)
			if err == nil {
				return nil
			}
			lines := strings.Split(err.Error(), "\n")
			slices.Sort(lines)
			return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(lines, "\n"))
		}
		if wantErr == nil {
			wantErr = nil
		} else {
			// The wrapping above puts "invalid configuration: " before
			// the first line.
			wantErr[0] = ErrInvalid.Error() + ": " + wantErr[0]
		}
		if msg := runApplyCase(c.o, c.want, wantErr, apply); msg != "" {
			t.Errorf("%+v: %s", c.o, msg)
		}
	}
}
