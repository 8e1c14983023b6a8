package squidconf

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
)

// TestRenderHandover: the sandbox's port has no ssl-bump (a refusal there is
// a 403); only CONNECTs to 443 admitted at the front go to the TLS port,
// never direct; the access log comes after every ACL it names.
func TestRenderHandover(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example"})
	ssh, _ := allowlist.Parse([]string{"git.example"})
	conf, err := Render(Config{Session: "s", Port: 4001, TLSPort: 4002, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, SSHHosts: ssh})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(conf, "\n")
	var ports []string
	last := map[string]int{}
	for i, l := range lines {
		if strings.HasPrefix(l, "http_port") {
			ports = append(ports, l)
		}
		if f := strings.Fields(l); len(f) > 1 && f[0] == "acl" {
			last["acl"] = i
		}
		if strings.HasPrefix(l, "access_log") {
			last["access_log"] = i
		}
	}
	if len(ports) != 2 || ports[0] != "http_port 127.0.0.1:4001 name=gate_front" || !strings.HasPrefix(ports[1], "http_port 127.0.0.1:4002 name=gate_tls worker-queues ssl-bump ") {
		// Only the TLS port is shared with aisb's hold (hold.go); the
		// front, the sandbox's way out, is squid's alone.
		t.Errorf("http_port lines %q", ports)
	}
	for _, want := range []string{
		"cache_peer_access gate_tls_peer allow gate_at_front gate_connect gate_tls_target",
		"cache_peer_access gate_tls_peer deny all",
		"never_direct allow gate_at_front gate_connect gate_tls_target",
		"acl gate_tls_target port 443",
		"tcp_outgoing_address " + audit.SelfAddr + " gate_to_tls_peer",
		"acl gate_clients src 127.0.0.1/32 " + audit.SelfAddr + "/32 ::1",
	} {
		if !strings.Contains(conf, want+"\n") {
			t.Errorf("missing %q", want)
		}
	}
	if last["access_log"] < last["acl"] {
		t.Error("access_log comes before an ACL")
	}
	if strings.Count(conf, "\naccess_log ") != 1 {
		t.Error("not exactly one access_log")
	}
}

// TestSNIHelper runs the helper squid asks about ClientHellos, as squid
// feeds it ("SNI TARGET QUESTION", "-" for a missing value).
func TestSNIHelper(t *testing.T) {
	in := strings.Join([]string{
		"a.example a.example present",
		"- a.example present",
		"a.example a.example target",
		"b.example a.example target",
		"a.example. a.example target",
		"- a.example target",
		"A.example a.example target",
		"a.example a.example other",
	}, "\n") + "\n"
	cmd := exec.Command("/bin/sh", "-c", SNIHelper)
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "OK ERR OK ERR OK ERR ERR ERR"
	if got := strings.Join(strings.Fields(string(out)), " "); got != want {
		t.Errorf("answers %q, want %q", got, want)
	}
}

// TestRenderHandedNotAskedAgain: on the TLS port a tunnel the front handed
// over is not put to the live helper again (one question, asked once).
func TestRenderHandedNotAskedAgain(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example", "192.0.2.7"})
	conf, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, Helper: &Helper{Program: "/ask/h", Socket: "/ask/s"}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "http_access") && strings.Contains(l, "!gate_live") {
			n++
			if !strings.Contains(l, " !gate_handed !gate_live ") {
				t.Errorf("%q asks about a tunnel the front already admitted", l)
			}
		}
	}
	if n != 2 || !strings.Contains(conf, "\nacl gate_handed all-of gate_connect gate_peer !gate_at_front\n") {
		t.Errorf("%d asking lines; gate_handed:\n%s", n, conf)
	}
}
