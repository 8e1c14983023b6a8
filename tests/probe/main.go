// Command probe is the static binary the integration tests put inside a
// sandbox to try one way out and report what happened: exit 0 when it got
// through, 1 when it did not, 2 on a usage error. It prints one line either way.
package main

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
)

const timeout = 3 * time.Second

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "tcp":
		need(args, 1)
		err = probeTCP(args[0])
	case "http":
		need(args, 1)
		err = probeHTTP(args[0], "")
	case "http-proxy":
		need(args, 2)
		err = probeHTTP(args[1], args[0])
	case "dns":
		need(args, 2)
		err = probeDNS(args[0], args[1], "udp")
	case "dns-tcp":
		need(args, 2)
		err = probeDNS(args[0], args[1], "tcp")
	case "udp":
		need(args, 1)
		err = probeUDP(args[0])
	case "socket":
		need(args, 1)
		err = probeSocket(args[0])
	case "ping":
		need(args, 1)
		err = probePing(args[0])
	case "nproc":
		need(args, 1)
		err = probeNproc(args[0])
	case "alloc":
		need(args, 1)
		err = probeAlloc(args[0])
	case "loopback":
		need(args, 0)
		err = probeLoopback()
	case "status":
		need(args, 0)
		err = probeStatus()
	case "nft":
		need(args, 1)
		err = probeNFT(args[0])
	case "family":
		need(args, 1)
		err = probeFamily(args[0])
	case "families":
		need(args, 0)
		err = probeFamilies()
	case "socketpair":
		need(args, 0)
		err = probeSocketpair()
	case "netlink-route":
		need(args, 0)
		err = probeNetlinkRoute()
	case "io_uring":
		need(args, 0)
		err = probeIOUring()
	case "unix":
		need(args, 1)
		err = probeUnix(args[0])
	case "swap-on-read":
		need(args, 2)
		err = swapOnRead(args[0], args[1])
	default:
		usage()
	}
	if err != nil {
		fmt.Printf("blocked: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe tcp ADDR:PORT | http URL | http-proxy PROXY URL | dns SERVER NAME | dns-tcp SERVER NAME | udp ADDR:PORT | ping ADDR | socket raw|packet|icmp|icmp6 | nproc N | alloc MIB | loopback | status | nft list|flush|delete|accept | family NAME | families | socketpair | netlink-route | io_uring | unix PATH|@NAME | swap-on-read FILE REPLACEMENT")
	os.Exit(2)
}

func need(args []string, n int) {
	if len(args) != n {
		usage()
	}
}

func probeTCP(addr string) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	fmt.Printf("connected %s %q\n", addr, strings.TrimSpace(string(buf[:n])))
	return nil
}

func probeHTTP(target, proxy string) error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Proxy: nil}
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil {
			return err
		}
		tr.Proxy = http.ProxyURL(u)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * timeout}).Get(target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	fmt.Printf("status %d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	return nil
}

// probeDNS sends one A query for name and reports the answer's addresses.
func probeDNS(server, name, network string) error {
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, "53")
	}
	q := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	c, err := net.DialTimeout(network, server, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if network == "tcp" {
		q = append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)
	}
	if _, err := c.Write(q); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if network == "tcp" {
		buf, n = buf[2:], n-2
	}
	if n < 12 || buf[0] != 0x12 || buf[1] != 0x34 {
		return errors.New("malformed answer")
	}
	fmt.Printf("answered rcode=%d answers=%d\n", buf[3]&0xf, binary.BigEndian.Uint16(buf[6:8]))
	return nil
}

func probeUDP(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Printf("echoed %q\n", buf[:n])
	return nil
}

func probeSocket(kind string) error {
	var fd int
	var err error
	switch kind {
	case "raw":
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
	case "packet":
		fd, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0x0300) // htons(ETH_P_ALL)
	case "icmp":
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMP)
	case "icmp6":
		fd, err = syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMPV6)
	default:
		usage()
	}
	if err != nil {
		return err
	}
	syscall.Close(fd)
	fmt.Printf("opened %s socket\n", kind)
	return nil
}

// probeLoopback listens on 127.0.0.1 and connects to itself.
func probeLoopback() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	return probeTCP(ln.Addr().String())
}

// probeStatus prints the identity and capability lines of /proc/self/status
// and the effective uid, one per line. It always exits 0.
func probeStatus() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, k := range []string{"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:"} {
			if strings.HasPrefix(line, k) {
				fmt.Println(strings.Join(strings.Fields(line), " "))
			}
		}
	}
	fmt.Printf("euid: %d\n", os.Geteuid())
	return nil
}

// probeNFT tries to change (or read) the sandbox's table over netlink.
func probeNFT(op string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: "aisb"}
	switch op {
	case "list":
		ts, err := c.ListTables()
		if err != nil {
			return err
		}
		fmt.Printf("listed %d tables\n", len(ts))
		return nil
	case "flush":
		c.FlushRuleset()
	case "delete":
		c.DelTable(t)
	case "accept":
		accept := nftables.ChainPolicyAccept
		c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	default:
		usage()
	}
	if err := c.Flush(); err != nil {
		return err
	}
	fmt.Printf("changed the table: %s\n", op)
	return nil
}

// probePing sends one ICMP echo over an unprivileged ICMP datagram socket
// (allowed by net.ipv4.ping_group_range) and waits for the reply.
func probePing(addr string) error {
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		return fmt.Errorf("not an IPv4 address: %s", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMP)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	echo := []byte{8, 0, 0, 0, 0, 0, 0, 1, 'a', 'i', 's', 'b'}
	sa := &syscall.SockaddrInet4{}
	copy(sa.Addr[:], ip)
	if err := syscall.Sendto(fd, echo, 0, sa); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < 1 || buf[0] != 0 {
		return fmt.Errorf("unexpected ICMP type %d", buf[0])
	}
	fmt.Printf("echo reply from %s\n", addr)
	return nil
}

// probeNproc starts up to n sleeping children and reports how many started;
// it fails when fewer than n could.
func probeNproc(arg string) error {
	var n int
	fmt.Sscanf(arg, "%d", &n)
	var procs []*os.Process
	defer func() {
		for _, p := range procs {
			p.Kill()
			p.Wait()
		}
	}()
	for i := 0; i < n; i++ {
		p, err := os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{})
		if err != nil {
			return fmt.Errorf("started %d of %d: %v", len(procs), n, err)
		}
		procs = append(procs, p)
	}
	fmt.Printf("started %d processes\n", n)
	return nil
}

// probeAlloc maps and touches MIB mebibytes of anonymous memory.
func probeAlloc(arg string) error {
	var mib int
	fmt.Sscanf(arg, "%d", &mib)
	b, err := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("map %d MiB: %v", mib, err)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Printf("allocated %d MiB\n", mib)
	return nil
}

// swapOnRead is the trust race's agent: it waits until someone (the user,
// outside) has read FILE, then at once renames REPLACEMENT over it.
func swapOnRead(file, replacement string) error {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.InotifyAddWatch(fd, file, syscall.IN_CLOSE_NOWRITE); err != nil {
		return fmt.Errorf("watch %s: %w", file, err)
	}
	fmt.Println("watching")
	buf := make([]byte, 4096)
	if _, err := syscall.Read(fd, buf); err != nil {
		return fmt.Errorf("inotify read: %w", err)
	}
	if err := os.Rename(replacement, file); err != nil {
		return err
	}
	fmt.Println("swapped")
	return nil
}
