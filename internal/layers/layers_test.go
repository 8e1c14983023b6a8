package layers

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

const mod = "github.com/aisb-dev/aisb/"

// buildTags are the podman bindings' tags, as the Makefile writes them.
var buildTags = strings.Join(testhost.Tags(), " ")

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
	// Finding the programs for the engine's machine: the standard library's ELF reader, nothing else.
	"internal/progs": {mod, "github.com/", "golang.org/x/"},
	// The sandbox's ssh ProxyCommand, linked into aisb-entrypoint: a leaf.
	"entrypoint/tunnel": {mod, "github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli"},
	// A transparent sandbox's resolver and relay, linked into
	// aisb-entrypoint: networking only; the entrypoint hardens its process.
	"entrypoint/relay": {"github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli", "github.com/google/nftables", mod + "internal/", mod + "gate", mod + "ruleset"},
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
	"entrypoint": {"github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli", mod + "internal/config", mod + "internal/engine", mod + "gate", mod + "internal/sandbox", "k8s.io/", "sigs.k8s.io/", mod + "internal/kube"},
	// The static binary itself: the same, and never the Kubernetes types.
	"cmd/aisb-entrypoint": {"github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli", "k8s.io/", "sigs.k8s.io/", mod + "internal/kube"},
	// The manifests from typed inputs: no Podman, no configuration, no gate's life.
	"internal/kube":    {"github.com/containers/", mod + "internal/engine", mod + "internal/config", mod + "gate", mod + "internal/session", mod + "internal/sandbox", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"gate":             {mod + "internal/config", mod + "internal/sandbox", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"internal/sandbox": {mod + "internal/config", mod + "gate", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables"},
	"internal/reaper":  {mod + "internal/config", mod + "gate", mod + "internal/sandbox", mod + "internal/session"},
	// The live server decides for a session's gate and lists the running
	// sessions (one file each, under the user's state): it never starts anything.
	// It reads and writes the audit's vocabulary (gate/audit), not the
	// gate's container life: no Podman.
	"internal/live": {mod + "internal/config", mod + "internal/sandbox", mod + "internal/session", mod + "ruleset", mod + "entrypoint", "github.com/google/nftables", "github.com/containers/", mod + "internal/engine"},
	// The audit's vocabulary, parser, follower, caps and markers: files only.
	"gate/audit": {"github.com/containers/", mod + "internal/engine", mod + "internal/config", mod + "internal/sandbox", mod + "internal/session", mod + "gate/squidconf"},
	// squid.conf's text from typed inputs: pure, no Podman.
	"gate/squidconf": {"github.com/containers/", mod + "internal/engine", mod + "internal/config", mod + "internal/sandbox", mod + "internal/session", mod + "internal/tlsca"},
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

	// The in-memory engine: engine's floor, no bindings (TestBindingsOnlyInEngine).
	"internal/engine/enginefake": {mod + "internal/config", mod + "gate", mod + "internal/sandbox", mod + "internal/session", mod + "internal/image"},
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", buildTags, "-deps", "./"+pkg)
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

// TestReadmeLayout: the README's layout table names every package of the
// module, one row each, and nothing that is not one.
func TestReadmeLayout(t *testing.T) {
	readme, pkgs := readmeAndPackages(t)
	for _, problem := range layoutMismatch(readme, pkgs) {
		t.Error(problem)
	}
}

// TestReadmeLayoutCanFail: a row taken out of the table, or one added for
// no package, is seen.
func TestReadmeLayoutCanFail(t *testing.T) {
	readme, pkgs := readmeAndPackages(t)
	without := strings.Replace(readme, "| `internal/tail/` |", "| tail |", 1)
	if len(layoutMismatch(without, pkgs)) == 0 {
		t.Error("a README without internal/tail's row passed")
	}
	extra := strings.Replace(readme, "| `ruleset/` |", "| `ruleset/` | x |\n| `nosuch/` |", 1)
	if len(layoutMismatch(extra, pkgs)) == 0 {
		t.Error("a README with a row for no package passed")
	}
}

func readmeAndPackages(t *testing.T) (string, []string) {
	t.Helper()
	b, err := os.ReadFile(testhost.RepoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-tags", buildTags, "./...")
	cmd.Dir = testhost.RepoPath(".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(mod, "/")), "/")
		if rel == "" {
			rel = "."
		}
		pkgs = append(pkgs, rel)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages: the listing is broken", len(pkgs))
	}
	return string(b), pkgs
}

// layoutMismatch compares the README's "## Layout" table (first cells in
// backquotes, one package each) with the packages.
func layoutMismatch(readme string, pkgs []string) []string {
	_, layout, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		return []string{"README.md has no ## Layout section"}
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	var problems []string
	rows := map[string]bool{}
	for _, line := range strings.Split(layout, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.TrimSuffix(strings.Trim(strings.TrimSpace(cells[1]), "`"), "/")
		if rows[name] {
			problems = append(problems, "README layout lists "+name+" twice")
		}
		rows[name] = true
	}
	listed := map[string]bool{}
	for _, p := range pkgs {
		listed[p] = true
		if !rows[p] {
			problems = append(problems, "README layout has no row for package "+p)
		}
	}
	for r := range rows {
		if !listed[r] {
			problems = append(problems, "README layout lists "+r+", which is not a package")
		}
	}
	return problems
}

// rootEntries is what the repository's root may hold: the design's parts
// and the usual files. A new package goes under internal/ unless it is one
// of the design's parts.
var rootEntries = map[string]bool{
	".ci": true, ".gitignore": true, "Containerfile": true, "Makefile": true, "README.md": true,
	"embed.go": true, "go.mod": true, "go.sum": true,
	"cmd": true, "entrypoint": true, "ruleset": true, "gate": true, "contract": true,
	"internal": true, "tests": true, "bench": true, "docs": true,
}

// TestRootShowsTheDesign: the files git tracks at the root are only those.
func TestRootShowsTheDesign(t *testing.T) {
	cmd := exec.Command("git", "ls-files")
	cmd.Dir = testhost.RepoPath(".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		top, _, _ := strings.Cut(f, "/")
		seen[top] = true
	}
	for top := range seen {
		if !rootEntries[top] {
			t.Errorf("the root holds %s, which is none of the design's parts: move it under internal/ (or name it in rootEntries with a reason)", top)
		}
	}
	if !seen["gate"] || !seen["internal"] {
		t.Fatalf("git ls-files at the root lists %v: the listing is broken", seen)
	}
}

// bindings is Podman's client: internal/engine alone speaks it, behind
// engine.Engine, so that everything else can be driven by a fake.
const bindings = "github.com/containers/podman/v5/pkg/bindings"

// directImports maps every package of the module to its direct imports,
// its test files' included when withTests.
func directImports(t *testing.T, withTests bool) map[string][]string {
	t.Helper()
	format := `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`
	if withTests {
		format += `{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}`
	}
	cmd := exec.Command("go", "list", "-tags", buildTags, "-f", format, "./...")
	cmd.Dir = testhost.RepoPath(".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	return imports
}

func importsBindings(imports []string) []string {
	var out []string
	for _, i := range imports {
		if i == bindings || strings.HasPrefix(i, bindings+"/") {
			out = append(out, i)
		}
	}
	return out
}

func TestBindingsOnlyInEngine(t *testing.T) {
	for pkg, imports := range directImports(t, true) {
		if pkg == mod+"internal/engine" {
			continue
		}
		if bad := importsBindings(imports); len(bad) > 0 {
			t.Errorf("%s imports %s: Podman's bindings belong to internal/engine (call engine.Engine)", pkg, strings.Join(bad, ", "))
		}
	}
}

// kubeTypes are the Kubernetes API modules: internal/kube alone imports
// them, so the rest of aisb (and never the entrypoint) links none. Tests
// may (tests/ edits a rendered Pod to make its controls).
var kubeTypes = []string{"k8s.io/", "sigs.k8s.io/"}

func TestKubeTypesOnlyInKube(t *testing.T) {
	imports := directImports(t, false)
	seen := false
	for pkg, imps := range imports {
		for _, i := range imps {
			for _, k := range kubeTypes {
				if !strings.HasPrefix(i, k) {
					continue
				}
				if pkg == mod+"internal/kube" {
					seen = true
					continue
				}
				t.Errorf("%s imports %s: the Kubernetes types belong to internal/kube", pkg, i)
			}
		}
	}
	if !seen {
		t.Fatal("internal/kube lists no Kubernetes import: the listing is broken")
	}
}

// TestBindingsCheckCanFail: the listing sees internal/engine's own import
// of the bindings, so a passing TestBindingsOnlyInEngine means something.
func TestBindingsCheckCanFail(t *testing.T) {
	imports := directImports(t, true)
	if len(imports) < 20 {
		t.Fatalf("go list ./... lists %d packages: the listing is broken", len(imports))
	}
	if len(importsBindings(imports[mod+"internal/engine"])) == 0 {
		t.Fatal("internal/engine does not list the bindings among its imports: the listing is broken")
	}
}

// TestFakeOnlyInTests: the in-memory engine never links into a program;
// tests alone import it.
func TestFakeOnlyInTests(t *testing.T) {
	const fake = mod + "internal/engine/enginefake"
	for pkg, imports := range directImports(t, false) {
		if slices.Contains(imports, fake) {
			t.Errorf("%s imports %s outside its tests", pkg, fake)
		}
	}
	if !slices.Contains(directImports(t, true)[mod+"internal/sandbox"], fake) {
		t.Error("internal/sandbox's tests do not list enginefake: the listing is broken")
	}
}
