package main

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestServe: squid's lines in, one answer per channel out; OK only when aisb
// said exactly OK, ERR when it said anything else or cannot be reached.
func TestServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "helper.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			switch line {
			case "yes.test\n":
				c.Write([]byte("OK\n"))
			case "almost.test\n":
				c.Write([]byte("OK maybe\n"))
			default:
				c.Write([]byte("ERR\n"))
			}
			c.Close()
		}
	}()
	var out strings.Builder
	serve(sock, strings.NewReader("0 yes.test -\n1 no.test -\n2 almost.test -\n3\n4 -\n"), &out)
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	sort.Strings(got)
	if want := "0 OK,1 ERR,2 ERR,3 ERR,4 ERR"; strings.Join(got, ",") != want {
		t.Errorf("got %v, want %s", got, want)
	}
	out.Reset()
	serve(filepath.Join(t.TempDir(), "none.sock"), strings.NewReader("7 yes.test -\n"), &out)
	if out.String() != "7 ERR\n" {
		t.Errorf("no aisb: %q", out.String())
	}
}

// TestProbe: --probe prints two distinct loopback ports and the host's
// addresses as one JSON line.
func TestProbe(t *testing.T) {
	var b strings.Builder
	if code := probe(&b); code != 0 {
		t.Fatalf("probe exited %d", code)
	}
	var p Probe
	if err := json.Unmarshal([]byte(b.String()), &p); err != nil {
		t.Fatalf("probe printed %q: %v", b.String(), err)
	}
	if p.Port <= 0 || p.TLSPort <= 0 || p.Port == p.TLSPort || len(p.Addrs) == 0 {
		t.Errorf("probe: %+v", p)
	}
}
