package allowlist

import (
	"errors"
	"testing"
)

func TestParseSSHList(t *testing.T) {
	hosts, errs := ParseSSHList([]string{"github.com", "192.0.2.7", ".forge.example", "192.0.2.0/24", "git.forge.example", "https://x.example", "github.com"})
	if len(hosts) != 2 || hosts[0].String() != "github.com" || hosts[1].String() != ".forge.example" {
		t.Errorf("hosts %v", hosts)
	}
	want := []struct {
		index int
		kind  error
	}{{1, ErrSSHAddress}, {3, ErrSSHAddress}, {4, ErrCovered}, {5, ErrScheme}, {6, ErrDuplicate}}
	if len(errs) != len(want) {
		t.Fatalf("errors %v", errs)
	}
	for i, w := range want {
		if errs[i].Index != w.index || !errors.Is(errs[i], w.kind) {
			t.Errorf("error %d: %v (index %d), want index %d %v", i, errs[i], errs[i].Index, w.index, w.kind)
		}
	}
}
