package bench

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkTunnelCopy: where a tunnel's bytes cost CPU, hop by hop, side by
// side in one run. The gate's squid (its image, its binary) is run on the
// host's loopback with three ports: a plain CONNECT port (one hop, as
// squid's tunnel copies), an ssl-bump port that peeks and splices (one hop
// with the TLS step), and a front that hands its tunnels to that port as
// aisb's gate does (two hops). Beside it, a relay of this process that
// copies with splice(2) (Go's io.Copy between TCP sockets): the design that
// would take the copy out of user space. A client on the host (the probe)
// downloads from the test upstream through each; the row is the copier's
// CPU time per GiB, which, unlike the wall-clock rate, hardly depends on
// what else the machine runs.
func BenchmarkTunnelCopy(b *testing.B) {
	uri := testhost.Service(b)
	tag := gateImage(b, connect(b, uri))
	ports, err := freePorts(3)
	if err != nil {
		b.Fatal(err)
	}
	plain, bump, front := ports[0], ports[1], ports[2]
	dir := testhost.UserDir(b)
	testhost.WriteUserFile(b, filepath.Join(dir, "squid.conf"), copySquidConf(plain, bump, front))
	certPEM, keyPEM := selfSigned(b)
	testhost.WriteUserFile(b, filepath.Join(dir, "ca.pem"), certPEM)
	testhost.WriteUserFile(b, filepath.Join(dir, "ca.key"), keyPEM)
	name := fmt.Sprintf("aisb-bench-copy-%d", os.Getpid())
	if err := podmanCLI("run", "-d", "--name", name, "--network=host", "--user", "proxy", "--userns=keep-id:uid=13,gid=13",
		"-v", dir+":/x", "--entrypoint", "squid", tag, "-N", "-f", "/x/squid.conf")(); err != nil {
		b.Fatal(err)
	}
	defer podmanCLI("rm", "-f", "-t", "0", name)()
	squidPid := containerPid(b, name)

	relayPort, relayCPU := spliceRelay(b)
	probe := testhost.Binary(b, "bench/probe")
	ca := filepath.Join(testhost.StateDir, "ca.pem")
	const size = 512 << 20
	download := func(port int) (mbs, clientCPU float64, err error) {
		cmd := exec.Command(probe, "download", "-n", "1", "-ca", ca, upstreamURL+"/bytes/"+strconv.Itoa(size))
		cmd.Env = []string{"HTTPS_PROXY=http://127.0.0.1:" + strconv.Itoa(port)}
		out, err := cmd.Output()
		if err != nil {
			return 0, 0, fmt.Errorf("probe through port %d: %v", port, err)
		}
		var d struct {
			Bytes   int64
			Seconds float64
		}
		if err := json.Unmarshal(out, &d); err != nil || d.Bytes != size {
			return 0, 0, fmt.Errorf("probe through port %d printed %q", port, out)
		}
		return float64(d.Bytes) / d.Seconds / 1e6, cpuSeconds(cmd.ProcessState), nil
	}
	// squid checks its peer (the bump port) before it listens, and treats
	// it as down until a check succeeds: the front is tried until it works.
	if err := testhost.WaitFor(30*time.Second, func() error { _, _, err := download(front); return err }); err != nil {
		b.Fatalf("the front's hand-over never worked: %v", err)
	}
	type variant struct {
		what string
		port int
		cpu  func() float64
	}
	squidCPU := func() float64 { return procCPU(squidPid) }
	variants := []variant{
		{"squid, one hop (a plain CONNECT port)", plain, squidCPU},
		{"squid, one hop with the TLS step (an ssl-bump port: peek, splice)", bump, squidCPU},
		{"squid, two hops (the front hands over to its TLS port: aisb's gate)", front, squidCPU},
		{"a splice(2) relay (Go's io.Copy between TCP sockets), one hop", relayPort, relayCPU},
	}
	copier := map[string][]float64{}
	client := map[string][]float64{}
	rate := map[string][]float64{}
	for round := 0; round < 3; round++ {
		for _, v := range variants {
			before := v.cpu()
			mbs, ccpu, err := download(v.port)
			if err != nil {
				b.Fatalf("%s: %v", v.what, err)
			}
			gib := float64(size) / (1 << 30)
			copier[v.what] = append(copier[v.what], (v.cpu()-before)/gib)
			client[v.what] = append(client[v.what], ccpu/gib)
			rate[v.what] = append(rate[v.what], mbs)
		}
	}
	mid := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	twoHops := variants[2].what
	for _, v := range variants {
		report(figure{part: partNetwork, what: "CPU per GiB of a tunnel's copy: " + v.what,
			measured: fmt.Sprintf("%.2f s (client %.2f s; %.0f MB/s)", mid(copier[v.what]), mid(client[v.what]), mid(rate[v.what])),
			baseline: fmt.Sprintf("aisb's two hops: %.2f s", mid(copier[twoHops])), ratio: mid(copier[v.what]) / mid(copier[twoHops]), goal: noGoal})
	}
}

// copySquidConf is the gate's squid reduced to its copying: its three ports
// (see BenchmarkTunnelCopy) and what every gate turns off.
func copySquidConf(plain, bump, front int) string {
	return fmt.Sprintf(`http_port 127.0.0.1:%d name=plain
http_port 127.0.0.1:%d name=bump ssl-bump tls-cert=/x/ca.pem tls-key=/x/ca.key generate-host-certificates=off
http_port 127.0.0.1:%d name=front
pid_filename /x/squid.pid
cache_log /x/cache.log
cache deny all
cache_mem 0 MB
icp_port 0
htcp_port 0
pinger_enable off
client_db off
netdb_filename none
mime_table /dev/null
digest_generation off
logfile_rotate 0
shutdown_lifetime 1 seconds
via off
dns_nameservers %s
access_log none
acl step1 at_step SslBump1
acl atfront myportname front
ssl_bump peek step1
ssl_bump splice all
http_access allow all
cache_peer 127.0.0.1 parent %d 0 no-query no-digest no-netdb-exchange name=tlspeer
cache_peer_access tlspeer allow atfront
cache_peer_access tlspeer deny all
never_direct allow atfront
connect_retries 3
`, plain, bump, front, testhost.UpstreamAddr, bump)
}

// spliceRelay serves CONNECT on a loopback port, to the test upstream
// whatever the name, and copies with io.Copy (splice(2) on Linux). Its CPU
// is this process's, which does nothing else meanwhile.
func spliceRelay(b *testing.B) (port int, cpu func() float64) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relayOne(c.(*net.TCPConn))
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() float64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return tv(ru.Utime) + tv(ru.Stime)
	}
}

func relayOne(c *net.TCPConn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	u, err := net.Dial("tcp", net.JoinHostPort(testhost.UpstreamAddr, "443"))
	if err != nil {
		return
	}
	up := u.(*net.TCPConn)
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	go func() { io.Copy(up, br); up.CloseWrite() }()
	io.Copy(c, up)
}

// selfSigned is the bump port's certificate (squid needs one to start;
// nothing is ever signed with it: every tunnel is spliced).
func selfSigned(b *testing.B) (certPEM, keyPEM string) {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aisb bench copy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}))
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// containerPid is the host pid of a container's first process.
func containerPid(b *testing.B, name string) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := testhost.UserCommand(ctx, "podman", "inspect", "--format", "{{.State.Pid}}", name).Output()
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || perr != nil || pid <= 0 {
		b.Fatalf("the pid of %s: %v %q", name, err, out)
	}
	return pid
}

// procCPU is a process's user and system time so far, in seconds.
func procCPU(pid int) float64 {
	f := procStat(pid)
	if f == nil {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

// procStat is /proc/PID/stat's fields after the command's name (the
// state first), or nil if the process is gone.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

func cpuSeconds(ps *os.ProcessState) float64 {
	return ps.UserTime().Seconds() + ps.SystemTime().Seconds()
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
