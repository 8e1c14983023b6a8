package layers

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

const mod = "github.com/aisb-dev/aisb/"

// forbidden lists, for each package, imports that must never appear among
// its dependencies (direct or not). Floors, from the leaves up: contract,
// allowlist, netaddr, state, harness, engine, tunnel, project, tlsca;
// knownhosts, ruleset, config, image;
// entrypoint, gate, sandbox, reaper; session, doctor; cmd.
var forbidden = map[string][]string{
	"contract":           {mod},
	"internal/tlsca":     {mod},
	"internal/netaddr":   {mod},
	"internal/state":     {mod},
	"internal/allowlist": {mod + "internal/config", mod + "gate", mod + "ruleset", mod + "internal/engine", mod + "internal/harness"},
	// The sandbox's ssh ProxyCommand, linked into aisb-entrypoint: a leaf.
	"entrypoint/tunnel": {mod, "github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli"},
	// What the project directory is and holds: files only, no Podman, no configuration.
	"internal/project":    {mod + "internal/config", mod + "internal/engine", mod + "gate", mod + "internal/sandbox", mod + "internal/session", mod + "internal/live", "github.com/containers/"},
	"internal/knownhosts": {mod + "internal/config", mod + "internal/engine", mod + "gate", mod + "internal/sandbox", mod + "internal/session", "github.com/containers/"},
	"internal/safefile":   {mod},
	"internal/termsafe":   {mod},
	"internal/harness":    {mod + "internal/config", mod + "internal/engine", mod + "gate", "github.com/containers/"},
	"internal/engine":     {mod + "internal/config", mod + "gate", mod + "internal/sandbox", mod + "internal/session", mod + "internal/image"},
	"ruleset":             {mod + "internal/config", mod + "internal/allowlist", mod + "internal/engine", mod + "gate", mod + "internal/sandbox", mod + "internal/session", "github.com/containers/"},
	"internal/config":     {mod + "internal/engine", mod + "gate", mod + "internal/sandbox", mod + "internal/session", mod + "ruleset", "github.com/containers/", "github.com/google/nftables"},
	"internal/image":      {mod + "internal/config", mod + "gate", mod + "internal/sandbox", mod + "internal/session"},
	// The entrypoint runs first in every sandbox: small and static, no
	// Podman, no TOML, no CLI framework.
	"entrypoint":       {"github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli", mod + "internal/config", mod + "internal/engine", mod + "gate", mod + "internal/sandbox"},
	"gate":             {mod + "internal/config", mod + "internal/sandbox", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"internal/sandbox": {mod + "internal/config", mod + "gate", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"internal/reaper":  {mod + "internal/config", mod + "gate", mod + "internal/sandbox", mod + "internal/session"},
	// The live server decides for a session's gate and lists the running
	// sessions (one file each, under the user's state): it never starts anything.
	"internal/live": {mod + "internal/config", mod + "internal/sandbox", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	// The gate's helper runs inside the gate: stdlib only.
	"cmd/aisb-gatehelper": {mod, "github.com/", "golang.org/x/"},
	// Review reads and writes files only: no Podman, no configuration.
	"internal/review":   {"github.com/containers/", mod + "internal/config", mod + "internal/engine", mod + "gate", mod + "internal/sandbox", mod + "internal/session"},
	"internal/statevol": {mod + "gate", mod + "internal/sandbox", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"internal/session":  {mod + "ruleset", mod + "entrypoint", mod + "internal/doctor", "github.com/google/nftables"},
	"internal/doctor":   {mod + "internal/session", mod + "internal/config", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	// The CLI need not link nftables: only aisb-entrypoint does.
	"cmd/aisb": {mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},

	// The benchmarks' client inside a sandbox: a leaf.
	"bench/probe": {mod},
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", strings.Join(testhost.Tags(), " "), "-deps", "./"+pkg)
	cmd.Dir = testhost.RepoPath(".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func TestLayers(t *testing.T) {
	for pkg, bad := range forbidden {
		t.Run(pkg, func(t *testing.T) {
			for _, d := range deps(t, pkg) {
				if d == mod+pkg {
					continue
				}
				for _, b := range bad {
					if strings.HasPrefix(d, b) {
						t.Errorf("%s depends on %s (forbidden: %s)", pkg, d, b)
					}
				}
			}
		})
	}
}

// TestLayersCanFail: the check sees a real forbidden dependency, so a
// passing TestLayers means something.
func TestLayersCanFail(t *testing.T) {
	found := false
	for _, d := range deps(t, "cmd/aisb-entrypoint") {
		if d == "github.com/google/nftables" {
			found = true
		}
	}
	if !found {
		t.Fatal("aisb-entrypoint does not list google/nftables: the dependency listing is broken")
	}
}
