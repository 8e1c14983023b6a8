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
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// maxWait bounds one question; aisb enforces the real ask timeout.
const maxWait = 30 * time.Minute

func main() {
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
