package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/doctor"
	"github.com/aisb-dev/aisb/internal/testhost"
)

func doctorChecks(t *testing.T, r testhost.Result) map[string]doctor.Check {
	t.Helper()
	checks := map[string]doctor.Check{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var c doctor.Check
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("doctor --json line %q: %v\n%s", l, err, r)
		}
		if prev, ok := checks[c.Name]; !ok || prev.Status == doctor.Pass {
			checks[c.Name] = c
		}
	}
	return checks
}

// TestDoctor: doctor passes on the prepared host, and fails with the right
// reason when a precondition is taken away.
func TestDoctor(t *testing.T) {
	a := newAisb(t, testBaseImage(t), "")

	t.Run("prepared host", func(t *testing.T) {
		r := a.run(t, "doctor", "--json")
		checks := doctorChecks(t, r)
		for _, name := range []string{"podman", "network helper", "subordinate ids", "storage driver", "gate config", "control",
			"table installed", "gate reachable", "other host ports", "direct UDP and DNS", "raw sockets", "socket families", "agent vs table", "privileges", "fails closed"} {
			if c := checks[name]; c.Status != doctor.Pass {
				t.Errorf("%s: %s %s", name, c.Status, c.Reason)
			}
		}
		if c := checks["resource limits"]; c.Status != doctor.Warn {
			t.Errorf("resource limits on cgroup v1: %+v", c)
		}
		if r.Code != 0 {
			t.Errorf("exit %d: %s", r.Code, r.Stderr)
		}
	})

	t.Run("pasta unavailable", func(t *testing.T) {
		// A PATH with everything of this host but pasta, for the service.
		bin := testhost.AgentDir(t)
		for _, dir := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if n := e.Name(); !strings.HasPrefix(n, "pasta") && !strings.HasPrefix(n, "passt") {
					os.Symlink(filepath.Join(dir, n), filepath.Join(bin, n))
				}
			}
		}
		b := *a
		b.private = true // not the shared service: the one below
		uri := testhost.ServiceWith(t, []string{"PATH=" + bin})
		r := b.runEnv(t, []string{"CONTAINER_HOST=" + uri}, "doctor", "--json", "--network-helper", "pasta")
		c := doctorChecks(t, r)["network helper"]
		if r.Code == 0 || c.Status != doctor.Fail || !strings.Contains(c.Reason, "pasta is not installed where podman runs") {
			t.Errorf("without pasta: exit %d, network helper %+v", r.Code, c)
		}
	})

	t.Run("table cannot be installed", func(t *testing.T) {
		// A seccomp profile that refuses netlink sockets: the kernel side of
		// the table is out of reach, as on a kernel without nf_tables.
		dir := testhost.AgentDir(t)
		profile := filepath.Join(dir, "no-netlink.json")
		os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 97, "args": [{"index": 0, "value": 16, "op": "SCMP_CMP_EQ"}]}]}`), 0o644)
		conf := filepath.Join(dir, "containers.conf")
		os.WriteFile(conf, []byte("[containers]\nseccomp_profile = \""+profile+"\"\n"), 0o644)
		b := *a
		b.private = true // the private service inherits the override
		r := b.runEnv(t, []string{"CONTAINERS_CONF_OVERRIDE=" + conf}, "doctor", "--json")
		c := doctorChecks(t, r)["table installed"]
		if r.Code == 0 || c.Status != doctor.Fail || !strings.Contains(c.Reason, "exit=77") {
			t.Errorf("without netlink: exit %d, table installed %+v\n%s", r.Code, c, r.Stdout)
		}
	})
}
