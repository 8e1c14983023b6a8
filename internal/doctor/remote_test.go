package doctor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containers/podman/v5/libpod/define"
)

// TestEngineIDs: on an engine that is not local, the subordinate ids are
// its user namespace's (its podman info's mappings, its user's own id at 0
// left out), never this host's /etc/subuid; too few fail, naming the fix.
func TestEngineIDs(t *testing.T) {
	for _, tc := range []struct {
		name, maps string
		want       []string
	}{
		{"mapped", `[{"container_id":0,"host_id":1012,"size":1},{"container_id":1,"host_id":1260000,"size":65536}]`,
			[]string{"PASS the engine's user namespace maps 65536 subordinate uids", "PASS the engine's user namespace maps 65536 subordinate gids"}},
		{"own id only", `[{"container_id":0,"host_id":1012,"size":1}]`,
			[]string{"FAIL the engine's user namespace maps 0 subordinate uids; its user needs a range of 65536 in its host's /etc/subuid (usermod --add-subuids)",
				"FAIL the engine's user namespace maps 0 subordinate gids; its user needs a range of 65536 in its host's /etc/subgid (usermod --add-subgids)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var info define.Info
			if err := json.Unmarshal([]byte(`{"host":{"idMappings":{"uidmap":`+tc.maps+`,"gidmap":`+tc.maps+`}}}`), &info); err != nil {
				t.Fatal(err)
			}
			r := &Report{}
			engineIDs(r, &info)
			var got []string
			for _, c := range r.Checks {
				if c.Name != "subordinate ids" {
					t.Errorf("check %q", c.Name)
				}
				got = append(got, c.Status+" "+c.Reason)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
