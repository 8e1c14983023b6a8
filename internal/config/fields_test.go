package config

import (
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
