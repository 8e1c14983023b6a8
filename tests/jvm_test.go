package tests

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// fetchJava is a JVM client with no proxy settings of its own: Java's
// HttpClient with the default ProxySelector, which reads no proxy
// variable (HTTPS_PROXY is not a JVM setting), so it connects to the
// address the name resolved to. It prints the selector's choice, the
// status and its own time (JVM start excluded), and exits 0 on a 200.
const fetchJava = `import java.net.ProxySelector;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class Fetch {
    public static void main(String[] args) {
        URI uri = URI.create(args[0]);
        long t0 = System.nanoTime();
        try {
            HttpClient c = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
            HttpResponse<String> r = c.send(HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(20)).build(),
                HttpResponse.BodyHandlers.ofString());
            System.out.println("status " + r.statusCode() + " via " + ProxySelector.getDefault().select(uri)
                + " in " + (System.nanoTime() - t0) / 1000000 + " ms " + r.body().trim());
            System.exit(r.statusCode() == 200 ? 0 : 1);
        } catch (Exception e) {
            System.out.println("failed " + e + " in " + (System.nanoTime() - t0) / 1000000 + " ms");
            System.exit(1);
        }
    }
}
`

var javaMsRE = regexp.MustCompile(` in (\d+) ms`)

// hostJDK is the host's JDK (tests/host/setup.sh installs Debian's), the
// directory holding bin/javac.
func hostJDK(t *testing.T) string {
	t.Helper()
	javac, err := exec.LookPath("javac")
	if err != nil {
		testhost.Skip(t, "no JDK on the host (javac): tests/host/setup.sh installs openjdk-17-jdk-headless")
	}
	real, err := filepath.EvalSymlinks(javac)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(real))
}

// TestTransparentJVM: a JVM, which ignores the proxy variables, reaches an
// allowed name over the transparent path, HTTPS (the upstream's own
// certificate, checked against its CA) and plain HTTP, the proxy
// variables set or not; an unlisted name and an internal address behind
// an allowed name are refused at once by the gate, with their audit
// lines, and an IP literal by the table. The JVM is the host's JDK copied
// into the project (the one bind mount; Debian 12's build runs on the
// sandbox's Debian 13), the program compiled on the host. Controls: the
// upstream answers 443 at unlisted.test's address and 80 at the IP
// literal from a plain container, and the same program, in the same
// session, fetches from the allowed name.
func TestTransparentJVM(t *testing.T) {
	parallel(t)
	jdk := hostJDK(t)
	base := testBaseImage(t)
	plainControl(t, base, "http", "https://"+testhost.UpstreamAddr+"/")
	plainControl(t, base, "tcp", testhost.Internal["private"]+":80")

	a := newAisb(t, base, dnsConfig())
	dir := filepath.Join(a.project, "jvm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, part := range []string{"bin", "conf", "lib", "release"} {
		if err := copyResolved(filepath.Join(jdk, part), filepath.Join(dir, "jdk", part)); err != nil {
			t.Fatalf("copy the JDK: %v", err)
		}
	}
	keytool := exec.Command(filepath.Join(jdk, "bin", "keytool"), "-importcert", "-noprompt", "-alias", "aisb-test-upstream",
		"-file", filepath.Join(testhost.StateDir, "ca.pem"), "-keystore", filepath.Join(dir, "trust.p12"),
		"-storetype", "PKCS12", "-storepass", "aisbtest")
	if out, err := keytool.CombinedOutput(); err != nil {
		t.Fatalf("keytool: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Fetch.java"), []byte(fetchJava), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(jdk, "bin", "javac"), "--release", "17", "-d", dir, filepath.Join(dir, "Fetch.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	t.Logf("the JDK copied, the truststore made and Fetch compiled in %v", time.Since(start).Round(time.Millisecond))

	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	p := func(s string) string { return "/tp-" + s + "-" + nonce }
	java := "/project/jvm/jdk/bin/java -XX:TieredStopAtLevel=1 -Djavax.net.ssl.trustStore=/project/jvm/trust.p12 " +
		"-Djavax.net.ssl.trustStorePassword=aisbtest -Djavax.net.ssl.trustStoreType=PKCS12 -cp /project/jvm Fetch "
	noproxy := "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY -u no_proxy -u NO_PROXY "
	cases := []timedCase{
		// The control of jvm-https-vars-set: the session has proxy
		// variables (grep -c exits 1 on none).
		{"proxy-vars-set", `env | grep -ci '^[a-z_]*_proxy='`, "ok", ""},
		{"jvm-https", noproxy + java + "https://tp.test" + p("jvm443"), "ok", "status 200 via [DIRECT]"},
		{"jvm-http", noproxy + java + "http://tp.test" + p("jvm80"), "ok", "status 200 via [DIRECT]"},
		// The proxy variables set: the JVM ignores them, the relay carries it.
		{"jvm-https-vars-set", java + "https://tp.test" + p("jvm443vars"), "ok", "status 200 via [DIRECT]"},
		{"jvm-unlisted", noproxy + java + "https://unlisted.test/jvm-unlisted-" + nonce, "refused", ""},
		{"jvm-internal", noproxy + java + "http://private.test/jvm-internal-" + nonce, "refused", "status 403"},
		{"jvm-ip-literal", noproxy + java + "http://" + testhost.Internal["private"] + "/jvm-literal-" + nonce, "refused", "ConnectException"},
	}
	writeUserFile(t, filepath.Join(a.project, "jvm.sh"), renderTimed(cases))
	start = time.Now()
	r := a.run(t, "run", "--allow", "tp.test", "--allow", "private.test", "--harness", "shell", "--", "sh", "/project/jvm.sh")
	t.Logf("the JVM session took %v", time.Since(start).Round(time.Millisecond))
	if r.Code != 0 {
		t.Fatalf("session: %s", r)
	}
	got := parseResults(t, r.Stdout)
	for _, c := range cases {
		res, ok := got[c.name]
		switch {
		case !ok:
			t.Errorf("%s: no result", c.name)
		case c.want == "ok" && res.code != 0:
			t.Errorf("%s: failed, want it to work: %d %s", c.name, res.code, res.out)
		case c.want == "refused" && res.code == 0:
			t.Errorf("%s: ESCAPED, want refused: %s", c.name, res.out)
		case !strings.Contains(res.out, c.match):
			t.Errorf("%s: output lacks %q: %s", c.name, c.match, res.out)
		}
		// Refused at once: the program's own time, the JVM's start
		// excluded (a drop would take its 10 s connect timeout).
		if c.want == "refused" && ok {
			m := javaMsRE.FindStringSubmatch(res.out)
			ms := -1
			if m != nil {
				ms, _ = strconv.Atoi(m[1])
			}
			if ms < 0 || time.Duration(ms)*time.Millisecond > refusedAtOnce {
				t.Errorf("%s: refused after %d ms, want at once (a reset, not a timeout): %s", c.name, ms, res.out)
			}
		}
	}
	for _, s := range []string{"jvm443", "jvm80", "jvm443vars"} {
		if !upstreamSaw(t, p(s)) {
			t.Errorf("the upstream never saw %s", p(s))
		}
	}
	for _, s := range []string{"/jvm-unlisted-" + nonce, "/jvm-internal-" + nonce, "/jvm-literal-" + nonce} {
		if upstreamSaw(t, s) {
			t.Errorf("ESCAPED: the upstream saw %s", s)
		}
	}
	rules := map[string]int{}
	for _, e := range a.events(t) {
		if e.Event == audit.EventBlocked || e.Event == audit.EventAllowed {
			rules[e.Rule+" "+strings.SplitN(e.Host, ":", 2)[0]]++
		}
	}
	for _, want := range []string{audit.RuleNotListed + " unlisted.test", audit.RuleInternal + " private.test", audit.RuleAllowed + " tp.test"} {
		if rules[want] == 0 {
			t.Errorf("audit: no %q event (have %v)", want, rules)
		}
	}
	if t.Failed() {
		t.Logf("sandbox output:\n%s\n%s", r.Stdout, r.Stderr)
	}
}

// copyResolved copies the file or tree src to dst, following symbolic
// links (Debian's JDK links conf and its cacerts outside its tree), so that
// the copy stands alone in the sandbox; a link to nothing (lib/src.zip,
// without the source package) is left out.
func copyResolved(src, dst string) error {
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode().Perm())
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := copyResolved(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
