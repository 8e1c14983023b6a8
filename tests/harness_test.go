package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// loopCase is one harness preset's agent loop against the scripted model
// of the test upstream (tests/upstream/model.go): the harness sends the
// prompt, the model answers with a call of the harness's own file-writing
// (or shell) tool, the harness runs it in the sandbox and sends the result
// back, the model ends the turn. The file it leaves in /project is the proof;
// once through the proxy variables and once without them.
type loopCase struct {
	harness string
	env     string // the key's variable, set by the gate
	header  string // the header the gate sets on api.allowed.test
	prefix  string // before the key in the header
	setup   string // shell lines pointing the harness at api.allowed.test/<harness>
	run     string // the harness's one-shot command; $PROMPT holds the prompt
}

var loopCases = map[string]loopCase{
	"pi": {
		harness: "pi", env: "ANTHROPIC_API_KEY", header: "x-api-key",
		setup: `mkdir -p ~/.pi/agent && printf '%s' '{"providers": {"anthropic": {"baseUrl": "https://api.allowed.test/pi"}}}' >~/.pi/agent/models.json`,
		run:   `pi -p --provider anthropic "$PROMPT"`,
	},
	"claude": {
		harness: "claude", env: "ANTHROPIC_API_KEY", header: "x-api-key",
		setup: `export ANTHROPIC_BASE_URL=https://api.allowed.test/claude`,
		run:   `claude -p --allowedTools Write --permission-mode acceptEdits "$PROMPT"`,
	},
	"codex": {
		harness: "codex", env: "OPENAI_API_KEY", header: "authorization", prefix: "Bearer ",
		setup: `mkdir -p ~/.codex && printf '%s\n' 'model = "aisb-scripted"' 'model_provider = "aisb"' '[model_providers.aisb]' 'name = "aisb"' 'base_url = "https://api.allowed.test/codex/v1"' 'env_key = "OPENAI_API_KEY"' 'wire_api = "responses"' >~/.codex/config.toml`,
		run:   `codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$PROMPT"`,
	},
	"opencode": {
		harness: "opencode", env: "ANTHROPIC_API_KEY", header: "x-api-key",
		// opencode fetches its model list from models.opencode.ai first;
		// the test upstream has no such name, and each run waited 6-7 s
		// around the failed fetch (its own log, 2026-12-04): the list
		// built into opencode is enough for the scripted model.
		setup: `export OPENCODE_DISABLE_MODELS_FETCH=1; mkdir -p ~/.config/opencode && printf '%s' '{"provider": {"anthropic": {"options": {"baseURL": "https://api.allowed.test/opencode/v1"}}}, "permission": {"edit": "allow", "bash": "allow"}}' >~/.config/opencode/opencode.json`,
		run:   `opencode run --model anthropic/claude-sonnet-4-5 "$PROMPT"`,
	},
}

// TestHarnessLoopClaude, TestHarnessLoopCodex and TestHarnessLoopOpencode:
// each preset's image is built as aisb builds it for a user (`aisb image
// build`), the harness runs one real agent loop through the gate, its key
// set by the gate (the sandbox holds the placeholder), and the file its
// tool call wrote is in the project. Each image from nothing costs 1-2.5
// minutes (npm's install of the package, the commit of its layer, the copy
// Podman makes for the sandbox's user ids; npm's download is seconds of
// it), the loop itself 16-31 s. make test runs the three in a lane of
// their own beside the shared one (tests/run.sh), where they would hold
// three slots on the lane gate/ waits for; the build comes before a slot
// is taken (parallel's acquire) all the same, for a run with slots.
// `make test-harness` runs just these three. pi's loop is
// TestCredentialsPiHarness (alone: its image is shared with the terminal
// tests of the second user).
func TestHarnessLoopClaude(t *testing.T)   { harnessLoop(t, loopCases["claude"]) }
func TestHarnessLoopCodex(t *testing.T)    { harnessLoop(t, loopCases["codex"]) }
func TestHarnessLoopOpencode(t *testing.T) { harnessLoop(t, loopCases["opencode"]) }

// harnessLoop builds c's image, then runs c's loop in one session and
// checks the file, the key inside, and the key and scheme of every model
// request at the upstream.
func harnessLoop(t *testing.T, c loopCase) {
	t.Helper()
	t.Parallel()
	cfg := dnsConfig() + `allowed_hosts = ["allowed.test"]
upstream_ca = ["` + filepath.Join(testhost.StateDir, "ca.pem") + `"]

[[credentials]]
host = "api.allowed.test"
header = "` + c.header + `"
env = "` + c.env + `"
prefix = "` + c.prefix + `"
`
	// The test base, which the other tests of each user build on too: a
	// second family of the same images on the plain base costs make test
	// the copy Podman makes of each for the sandbox's user ids (~600 MB
	// each). Not pi's, whose user builds pi on the plain base for
	// TestReadmeMainJob (the README's line) and TestStatePiTerminal.
	base := testBaseImage(t)
	if c.harness == "pi" {
		base = testhost.BaseImage
	}
	a := newAisb(t, base, cfg)
	// The image first, outside the shared lane's slots (parallel's
	// acquire): a failed build fails the test. The build lock keeps the
	// build tests of another process from removing images meanwhile.
	start := time.Now()
	release, _, err := buildFile.hold(syscall.LOCK_SH)
	if err != nil {
		t.Fatalf("build lock %s: %v", buildFile, err)
	}
	r := a.run(t, "image", "build", "--harness", c.harness)
	release()
	if r.Code != 0 {
		t.Fatalf("aisb image build --harness %s: %s", c.harness, r)
	}
	t.Logf("the %s image in %v (outside a slot)", c.harness, time.Since(start).Round(time.Second))
	slots.acquire(t)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	key := "REAL" + strings.ToUpper(c.harness) + "KEY-" + stamp
	word := c.harness + "loop" + stamp
	// The loop runs twice: through the proxy variables, then with every
	// proxy variable unset, over the transparent path (the relay carries
	// the harness's own connections to the gate by name).
	script := c.setup + `
echo "key=$` + c.env + `"
loop() {
	PROMPT="Please do this: AISB-LOOP path=/project/` + c.harness + `-$1.txt content=` + word + `-$1"
	timeout 120 ` + c.run + ` </dev/null >/tmp/loop-$1.out 2>&1; rc=$?
	echo "loop-$1=$rc"
	[ "$rc" = 0 ] || tail -c 2000 /tmp/loop-$1.out
}
loop proxy
(
	for v in $(env | grep -i '^[a-z_]*proxy[a-z_]*=' | cut -d= -f1); do unset "$v"; done
	echo "proxy-vars=$(env | grep -ci proxy)"
	loop direct
)
`
	writeUserFile(t, filepath.Join(a.project, "loop.sh"), script)
	mark := headersMark(t)
	r = a.runEnv(t, []string{c.env + "=" + key}, "run", "--harness", c.harness, "--fresh", "--", "sh", "/project/loop.sh")
	if r.Code != 0 || !strings.Contains(r.Stdout, "loop-proxy=0") || !strings.Contains(r.Stdout, "loop-direct=0") {
		t.Fatalf("%s's agent loops in the sandbox: %s", c.harness, r)
	}
	if !strings.Contains(r.Stdout, "key=aisb-placeholder-the-gate-sets-the-real-key") {
		t.Errorf("%s's key inside the sandbox: %s", c.harness, r.Stdout)
	}
	// Control: the second loop really ran without a proxy variable.
	if !strings.Contains(r.Stdout, "proxy-vars=0") {
		t.Errorf("the no-proxy loop still had proxy variables: %s", r.Stdout)
	}
	for _, how := range []string{"proxy", "direct"} {
		file := c.harness + "-" + how + ".txt"
		got, err := os.ReadFile(filepath.Join(a.project, file))
		if err != nil || strings.TrimSpace(string(got)) != word+"-"+how {
			t.Errorf("the file %s's tool call wrote in /project (%s): %q, %v; want %q", c.harness, how, got, err, word+"-"+how)
		}
	}
	var model []upstreamRequest
	for _, u := range upstreamRequests(t, mark) {
		if u.Host == "api.allowed.test" && strings.HasPrefix(u.Path, "/"+c.harness+"/v1/") {
			model = append(model, u)
		}
	}
	// Two turns at least per loop: the prompt, then the tool's result.
	if len(model) < 4 {
		t.Fatalf("%s made %d model requests through the gate, want 4 or more: %s", c.harness, len(model), r)
	}
	for _, u := range model {
		if k := u.Headers[httpHeader(c.header)]; len(k) != 1 || k[0] != c.prefix+key {
			t.Errorf("%s's request %s arrived with %s %q, want the real key only", c.harness, u.Path, c.header, k)
		}
		if u.Scheme != "https" {
			t.Errorf("%s's request %s arrived over %s", c.harness, u.Path, u.Scheme)
		}
	}
}

// httpHeader is name as Go's net/http spells it in the upstream's log.
func httpHeader(name string) string {
	parts := strings.Split(strings.ToLower(name), "-")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "-")
}
