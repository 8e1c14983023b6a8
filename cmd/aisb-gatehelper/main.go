// Command aisb-gatehelper is squid's external ACL helper in a session's gate:
// for a request whose name the gate's own allowlist does not list, it asks the
// session's aisb over a UNIX socket, and answers ERR whenever aisb cannot be
// reached or says anything but OK.
//
// Squid runs it with concurrency: each input line is "CHANNEL NAME -" (squid
// 5 and later append the ACL's extra arguments, "-" for none), each
// output line "CHANNEL OK" or "CHANNEL ERR", in any order. To aisb it writes
// "NAME\n" on a fresh connection and reads one line back. It only ever asks:
// nothing it sends can answer a question.
//
// On an engine that is not local it also probes the gate's ports
// (--probe) and relays the helper's questions to aisb through the API
// (--bridge, bridge.go).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxWait bounds one question; aisb enforces the real ask timeout.
const maxWait = 30 * time.Minute

func main() {
	if len(os.Args) == 2 && os.Args[1] == probeFlag {
		os.Exit(probe(os.Stdout))
	}
	if len(os.Args) > 4 && os.Args[1] == probeFlag && os.Args[3] == "--" {
		os.Exit(probeThenExec(os.Args[2], os.Args[4:]))
	}
	if len(os.Args) == 3 && os.Args[1] == bridgeFlag {
		os.Exit(bridge(os.Args[2], os.Stdin, os.Stdout))
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: aisb-gatehelper SOCKET")
		os.Exit(2)
	}
	serve(os.Args[1], os.Stdin, os.Stdout)
}

// serve answers squid's questions from in on out until in ends.
func serve(sock string, in io.Reader, w io.Writer) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	var mu sync.Mutex
	out := bufio.NewWriter(w)
	var wg sync.WaitGroup
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		channel, name := f[0], ""
		if len(f) > 1 {
			name = f[1]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			answer := ask(sock, name)
			mu.Lock()
			fmt.Fprintf(out, "%s %s\n", channel, answer)
			out.Flush()
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// ask returns "OK" only when aisb said exactly that.
func ask(sock, name string) string {
	if name == "" || name == "-" || len(name) > 300 {
		return "ERR"
	}
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return "ERR"
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(maxWait))
	if _, err := fmt.Fprintf(c, "%s\n", name); err != nil {
		return "ERR"
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "OK\n" {
		return "ERR"
	}
	return "OK"
}

// probeFlag runs the helper as the first step of a gate on an engine that
// is not local (gate.Probe): in a container on the engine host's network,
// it picks the gate's two ports on that host's loopback and lists that
// host's addresses, and prints them as one JSON line (Probe) for aisb,
// which reads it through the API.
const probeFlag = "--probe"

// Probe is what --probe prints; gate.Probe reads the same fields.
type Probe struct {
	Port    int      `json:"port"`
	TLSPort int      `json:"tls_port"`
	Addrs   []string `json:"addrs"` // the host's interface addresses, CIDR
}

// probe picks two distinct free ports on 127.0.0.1 (both held at once, so
// they differ) and lists the host's addresses; 1 when it cannot.
func probe(w io.Writer) int {
	var p Probe
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, port := range []*int{&p.TLSPort, &p.Port} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(os.Stderr, "aisb-gatehelper: probe: %v\n", err)
			return 1
		}
		lns = append(lns, ln)
		*port = ln.Addr().(*net.TCPAddr).Port
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "aisb-gatehelper: probe: %v\n", err)
		return 1
	}
	for _, a := range addrs {
		p.Addrs = append(p.Addrs, a.String())
	}
	if err := json.NewEncoder(w).Encode(p); err != nil {
		return 1
	}
	return 0
}

// ReadyFile, in the directory probeThenExec waits on, is aisb's word that
// the gate's files are there (the last entry of their copy).
const ReadyFile = ".aisb-files"

// filesWait bounds how long probeThenExec waits for the gate's files.
const filesWait = 60 * time.Second

// probeThenExec is a remote gate's command (--probe DIR -- ARGV): the
// probe, printed on stderr (aisb reads it from the container's logs),
// then, once aisb has copied the gate's files into DIR (ReadyFile last),
// squid in its place (ARGV). No word within filesWait: exit 1, and squid
// never runs.
func probeThenExec(dir string, argv []string) int {
	if code := probe(os.Stderr); code != 0 {
		return code
	}
	for deadline := time.Now().Add(filesWait); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Lstat(dir + "/" + ReadyFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "aisb-gatehelper: the gate's files did not arrive in %s within %s\n", dir, filesWait)
			return 1
		}
	}
	bin, err := exec.LookPath(argv[0])
	if err == nil {
		err = syscall.Exec(bin, argv, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "aisb-gatehelper: exec %s: %v\n", argv[0], err)
	return 1
}
