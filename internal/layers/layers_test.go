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
// allowlist, netaddr, state, harness, engine, tunnel, gitdirs, tlsca;
// knownhosts, ruleset, config, image;
// entrypoint, gate, sandbox, reaper; session, doctor; cmd.
var forbidden = map[string][]string{
	"contract":  {mod},
	"tlsca":     {mod},
	"netaddr":   {mod},
	"state":     {mod},
	"allowlist": {mod + "config", mod + "gate", mod + "ruleset", mod + "engine", mod + "harness"},
	// The sandbox's ssh ProxyCommand, linked into aisb-entrypoint: a leaf.
	"tunnel":     {mod, "github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli"},
	"gitdirs":    {mod},
	"knownhosts": {mod + "config", mod + "engine", mod + "gate", mod + "sandbox", mod + "session", "github.com/containers/"},
	"safefile":   {mod},
	"termsafe":   {mod},
	"projectdir": {mod + "config", mod + "engine", mod + "gate", mod + "sandbox", mod + "session", "github.com/containers/"},
	"harness":    {mod + "config", mod + "engine", mod + "gate", "github.com/containers/"},
	"engine":     {mod + "config", mod + "gate", mod + "sandbox", mod + "session", mod + "image"},
	"ruleset":    {mod + "config", mod + "allowlist", mod + "engine", mod + "gate", mod + "sandbox", mod + "session", "github.com/containers/"},
	"config":     {mod + "engine", mod + "gate", mod + "sandbox", mod + "session", mod + "ruleset", "github.com/containers/", "github.com/google/nftables"},
	"image":      {mod + "config", mod + "gate", mod + "sandbox", mod + "session"},
	// The entrypoint runs first in every sandbox: small and static, no
	// Podman, no TOML, no CLI framework.
	"entrypoint": {"github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli", mod + "config", mod + "engine", mod + "gate", mod + "sandbox"},
	"gate":       {mod + "config", mod + "sandbox", mod + "session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"sandbox":    {mod + "config", mod + "gate", mod + "session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"reaper":     {mod + "config", mod + "gate", mod + "sandbox", mod + "session"},
	// A running session's registry: files under the user's state only.
	"registry": {mod + "config", mod + "engine", mod + "gate", mod + "sandbox", mod + "session", mod + "live", "github.com/containers/"},
	// The live server decides for a session's gate: it never starts anything.
	"live": {mod + "config", mod + "sandbox", mod + "session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	// The gate's helper runs inside the gate: stdlib only.
	"cmd/aisb-gatehelper": {mod, "github.com/", "golang.org/x/"},
	// Review reads and writes files only: no Podman, no configuration.
	"review":   {"github.com/containers/", mod + "config", mod + "engine", mod + "gate", mod + "sandbox", mod + "session"},
	"statevol": {mod + "gate", mod + "sandbox", mod + "session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"session":  {mod + "ruleset", mod + "entrypoint", mod + "doctor", "github.com/google/nftables"},
	"doctor":   {mod + "session", mod + "config", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	// The CLI need not link nftables: only aisb-entrypoint does.
	"cmd/aisb": {mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},

	// A leaf: the session's scan of the project for socket files.
	"projectscan": {mod},
	// The benchmarks' client inside a sandbox: a leaf.
	"bench/probe": {mod},
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-deps", "./"+pkg)
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
