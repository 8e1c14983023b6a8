package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// tomlKeys are the dotted keys of a configuration struct in declaration
// order: a struct field is a table whose fields are keys; anything else
// (a list, a map, [[credentials]]) is one key.
func tomlKeys(t reflect.Type, prefix string) ([]string, error) {
	var keys []string
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			return nil, fmt.Errorf("%s%s has no toml name", prefix, sf.Name)
		}
		if sf.Type.Kind() == reflect.Struct {
			sub, err := tomlKeys(sf.Type, prefix+name+".")
			if err != nil {
				return nil, err
			}
			keys = append(keys, sub...)
			continue
		}
		keys = append(keys, prefix+name)
	}
	return keys, nil
}

// checkTable says how table falls short of the configuration struct t: a
// key without an entry, an entry without a key, or entries out of order.
func checkTable(t reflect.Type, table []field) error {
	keys, err := tomlKeys(t, "")
	if err != nil {
		return err
	}
	var have []string
	for _, fd := range table {
		have = append(have, fd.key)
	}
	var problems []string
	for _, k := range keys {
		if !slices.Contains(have, k) {
			problems = append(problems, k+" has no entry in fields")
		}
	}
	for _, k := range have {
		if !slices.Contains(keys, k) {
			problems = append(problems, k+" is in fields but not in the struct")
		}
	}
	if len(problems) == 0 && !slices.Equal(keys, have) {
		problems = append(problems, fmt.Sprintf("fields are not in the struct's order %q", keys))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// TestFieldsCoverConfig: every key of Config has its one entry in fields,
// in the struct's order, so a new key cannot be forgotten by validation,
// merging, narrowing or the command line.
func TestFieldsCoverConfig(t *testing.T) {
	if err := checkTable(reflect.TypeOf(Config{}), fields); err != nil {
		t.Fatal(err)
	}

	// The control: Config with a new key at the top level, or in [network],
	// fails the same check.
	cfg := reflect.TypeOf(Config{})
	var top []reflect.StructField
	for i := range cfg.NumField() {
		top = append(top, cfg.Field(i))
	}
	extra := reflect.StructOf(append(slices.Clone(top), reflect.StructField{Name: "Extra", Type: reflect.TypeOf(0), Tag: `toml:"extra"`}))
	if err := checkTable(extra, fields); err == nil || !strings.Contains(err.Error(), "extra has no entry") {
		t.Errorf("Config with a top-level key: %v", err)
	}
	net := reflect.TypeOf(Network{})
	var nf []reflect.StructField
	for i := range net.NumField() {
		nf = append(nf, net.Field(i))
	}
	nested := slices.Clone(top)
	for i := range nested {
		if nested[i].Name == "Network" {
			nested[i].Type = reflect.StructOf(append(nf, reflect.StructField{Name: "Proxy", Type: reflect.TypeOf(""), Tag: `toml:"proxy"`}))
		}
	}
	if err := checkTable(reflect.StructOf(nested), fields); err == nil || !strings.Contains(err.Error(), "network.proxy has no entry") {
		t.Errorf("Config with a key in [network]: %v", err)
	}
	if err := checkTable(cfg, fields[1:]); err == nil || !strings.Contains(err.Error(), "version has no entry") {
		t.Errorf("fields without version: %v", err)
	}
	swapped := slices.Clone(fields)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	if err := checkTable(cfg, swapped); err == nil || !strings.Contains(err.Error(), "order") {
		t.Errorf("fields out of order: %v", err)
	}
}

// TestFieldRules: every entry says what a project file may do with its key.
// A key that is merged is either narrowed (possibly to nothing, with a
// notice) or refused in a project file; a refused key is never narrowed.
func TestFieldRules(t *testing.T) {
	for _, fd := range fields {
		if fd.merge != nil && fd.narrow == nil && fd.userOnly == "" {
			t.Errorf("%s is merged from files but has no rule for an untrusted project file: give it narrow or userOnly", fd.key)
		}
		if fd.userOnly != "" && (fd.narrow != nil || fd.narrowTrusted) {
			t.Errorf("%s is refused in project files and narrowed too", fd.key)
		}
		if fd.narrowTrusted && fd.narrow == nil {
			t.Errorf("%s is narrowed when trusted but has no narrow", fd.key)
		}
		if (fd.flag == "") != (fd.apply == nil) {
			t.Errorf("%s: flag %q and apply go together", fd.key, fd.flag)
		}
	}
	// The keys a project may never set, trusted or not, and the one it may
	// only turn off, trusted or not.
	var userOnly, narrowTrusted []string
	for _, fd := range fields {
		if fd.userOnly != "" {
			userOnly = append(userOnly, fd.key)
		}
		if fd.narrowTrusted {
			narrowTrusted = append(narrowTrusted, fd.key)
		}
	}
	if !slices.Equal(userOnly, []string{"network.upstream_ca", "credentials"}) || !slices.Equal(narrowTrusted, []string{"sandbox.ssh_agent"}) {
		t.Errorf("userOnly %q narrowTrusted %q", userOnly, narrowTrusted)
	}
}

// TestEveryOverrideApplies: each field of Overrides, set alone, changes the
// configuration or is refused, so no flag is read by nothing.
func TestEveryOverrideApplies(t *testing.T) {
	ot := reflect.TypeOf(Overrides{})
	for i := range ot.NumField() {
		sf := ot.Field(i)
		var o Overrides
		v := reflect.ValueOf(&o).Elem().Field(i)
		switch sf.Type.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int:
			v.SetInt(1)
		case reflect.Float64:
			v.SetFloat(1)
		case reflect.Slice:
			elem := reflect.New(sf.Type.Elem()).Elem()
			switch elem.Kind() {
			case reflect.String:
				elem.SetString("x")
			case reflect.Int:
				elem.SetInt(1)
			default:
				t.Fatalf("Overrides.%s: no sample for %s", sf.Name, sf.Type)
			}
			v.Set(reflect.Append(v, elem))
		default:
			t.Fatalf("Overrides.%s: no sample for %s", sf.Name, sf.Type)
		}
		r, before := &Resolved{Config: Default()}, &Resolved{Config: Default()}
		if err := r.Apply(o); err == nil && reflect.DeepEqual(r, before) {
			t.Errorf("Overrides.%s set alone changed nothing and was not refused: no entry in fields applies it", sf.Name)
		}
	}
}

// applyBase is summary of the defaults alone.
const applyBase = `mode=allow allow=[] ssh=[] ports=[] dns=[] ask=false ask_timeout=0 ca=[] pass=[] set=map[] pids=0 memory= cpus=0 harness=pi image=docker.io/library/debian:trixie-slim agent=false state=project logs=64m/512m credentials=0`

// applyCases are command lines over the defaults: what the configuration
// becomes, or the problems, one line each.
var applyCases = []struct {
	o    Overrides
	want string // replacements of applyBase: "old=>new", …
	err  []string
}{
	{o: Overrides{}},
	{o: Overrides{Mode: "open"}, want: "mode=allow=>mode=open"},
	{o: Overrides{Mode: "bad"}, err: []string{`command line: --net: "bad" is not a mode; write one of none, allow, no-gate, open`}},
	{o: Overrides{Allow: []string{"api.github.com", ".github.com", "192.0.2.1"}}, want: "allow=[]=>allow=[.github.com 192.0.2.1]"},
	{o: Overrides{Allow: []string{"a b"}}, err: []string{`command line: --allow: `}},
	{o: Overrides{AllowSSH: []string{"github.com"}}, want: "ssh=[]=>ssh=[github.com]"},
	{o: Overrides{AllowSSH: []string{"a b"}}, err: []string{`command line: --allow-ssh: `}},
	{o: Overrides{SSHAgent: true}, want: "agent=false=>agent=true"},
	{o: Overrides{HostPorts: []int{8080, 8080, 22}}, want: "ports=[]=>ports=[8080 22]"},
	{o: Overrides{HostPorts: []int{0}}, err: []string{`command line: --host-port: 0 is not a TCP port; write a number from 1 to 65535`}},
	{o: Overrides{Env: []string{"FOO", "A=1=2", "FOO"}}, want: "pass=[]=>pass=[FOO]|set=map[]=>set=map[A:1=2]"},
	{o: Overrides{Env: []string{"HOME=/x"}}, err: []string{`command line: --env: "HOME" is set by aisb itself to keep the sandbox on its gate; remove it`}},
	{o: Overrides{Env: []string{"SSH_AUTH_SOCK"}}, err: []string{`command line: --env: "SSH_AUTH_SOCK" is set by aisb itself when --ssh-agent forwards your agent; use that instead`}},
	{o: Overrides{Harness: "claude"}, want: "harness=pi=>harness=claude"},
	{o: Overrides{Harness: "nope"}, err: []string{`command line: --harness: `}},
	{o: Overrides{BaseImage: "other:1"}, want: "image=docker.io/library/debian:trixie-slim=>image=other:1"},
	{o: Overrides{Pids: 5, Memory: "1g", CPUs: 1.5}, want: "pids=0=>pids=5|memory==>memory=1g|cpus=0=>cpus=1.5"},
	{o: Overrides{Pids: -1}, err: []string{`command line: --pids: -1 is negative`}},
	{o: Overrides{Memory: "lots"}, err: []string{`command line: --memory: "lots" is not a size; write a number with an optional unit k, m or g, such as "2g"`}},
	{o: Overrides{CPUs: -1}, err: []string{`command line: --cpus: -1 is negative`}},
	{o: Overrides{CPUs: 0.001}, err: []string{`command line: --cpus: 0.001 is below the minimum 0.01`}},
	{o: Overrides{Ask: true}, want: "ask=false=>ask=true"},
	{o: Overrides{State: "none"}, want: "state=project=>state=none"},
	{o: Overrides{State: "all"}, err: []string{`command line: --state: "all" is not a state scope; write one of "none", "project", "harness"`}},
	{o: Overrides{Credentials: []string{"ANTHROPIC_API_KEY"}}, want: "allow=[]=>allow=[api.anthropic.com]|credentials=0=>credentials=1"},
	{o: Overrides{Credentials: []string{"UNKNOWN_X"}}, err: []string{`command line: --credential: UNKNOWN_X: no harness knows where this key goes; add a [[credentials]] table with host, header and env = "UNKNOWN_X" to your own configuration`}},
	{o: Overrides{Credentials: []string{"ANTHROPIC_API_KEY"}, Env: []string{"ANTHROPIC_API_KEY"}}, err: []string{`configuration: credentials[0]: ANTHROPIC_API_KEY is a credential and stays on your host; remove it from --env and env.pass`}},
	// Several problems: one line each, in the order of the keys in Config.
	{o: Overrides{Credentials: []string{"1X"}, State: "all", Pids: -1, Mode: "bad"}, err: []string{
		`command line: --net: "bad" is not a mode; write one of none, allow, no-gate, open`,
		`command line: --pids: -1 is negative`,
		`command line: --state: "all" is not a state scope; write one of "none", "project", "harness"`,
		`command line: --credential: "1X" is not a variable name; use letters, digits and underscores, not starting with a digit`}},
}

// runApplyCase applies o over the defaults with apply and says how the
// outcome differs from what is wanted, or "".
func runApplyCase(o Overrides, want string, wantErr []string, apply func(*Resolved, Overrides) error) string {
	r := &Resolved{Config: Default()}
	err := apply(r, o)
	if wantErr != nil {
		if err == nil || !errors.Is(err, ErrInvalid) {
			return fmt.Sprintf("error %v, want %q", err, wantErr)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(wantErr) {
			return fmt.Sprintf("error\n%s\nwant %q", err, wantErr)
		}
		for i := range lines {
			if !strings.HasPrefix(lines[i], wantErr[i]) {
				return fmt.Sprintf("error\n%s\nwant %q", err, wantErr)
			}
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("error %v", err)
	}
	s := applyBase
	for _, rep := range strings.Split(want, "|") {
		if from, to, ok := strings.Cut(rep, "=>"); ok {
			s = strings.Replace(s, from, to, 1)
		}
	}
	if got := summary(r); got != s {
		return fmt.Sprintf("got\n%s\nwant\n%s", got, s)
	}
	return ""
}

// TestApplyRules: each flag's effect and problems.
func TestApplyRules(t *testing.T) {
	for _, c := range applyCases {
		if msg := runApplyCase(c.o, c.want, c.err, (*Resolved).Apply); msg != "" {
			t.Errorf("%+v: %s", c.o, msg)
		}
	}
}
