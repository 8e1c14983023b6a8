package harness

import "testing"

// Every preset's hosts are valid allowlist entries: a session adds them to
// its allowlist, and a preset that did not parse would fail every session.
func TestPresetsParse(t *testing.T) {
	for _, name := range Names() {
		p, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		hosts, err := p.AllowedHosts()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(hosts) != len(p.Hosts) {
			t.Errorf("%s: %d of %d hosts parsed", name, len(hosts), len(p.Hosts))
		}
		if name != "shell" && (len(p.Command) == 0 || p.NPM == "") {
			t.Errorf("%s: no command or package", name)
		}
	}
	if _, err := (Preset{Name: "bad", Hosts: []string{"https://x.example"}}).AllowedHosts(); err == nil {
		t.Error("a preset host with a scheme was accepted")
	}
}
