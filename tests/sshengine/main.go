// Command sshengine drives a Podman service through engine.Connect, as the
// user it runs as, for the ssh:// tests (tests/remote_ssh_test.go): the
// keys and known_hosts come from the environment (engine.SSHFromEnv:
// CONTAINER_SSHKEY, AISB_SSH_KNOWN_HOSTS), as aisb's own.
//
//	-do probe   Connect, Info, run a --network=host container that lists
//	            the network interfaces it sees, create and remove another;
//	            prints a Probe as JSON. A failed Connect exits 3 with the error.
//	-do hold    Connect, print "connected", and wait to be killed.
//	-do pairs   Connect + one trivial container (create, start, wait,
//	            remove) + Close, alternately on -local and -uri, -n times;
//	            prints the durations as JSON (-connect-only: Connect and
//	            Close alone).
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
)

// Probe is what -do probe saw.
type Probe struct {
	Version    string
	Local      bool   // Connect's locality decision
	Why        string // and its reason
	Hostname   string // the service's host (Info)
	Interfaces string // the interfaces of /proc/net/dev in a --network=host container
	Created    bool   // a container was created
	Removed    bool   // and is gone after its removal
}

// Pairs is what -do pairs measured, in milliseconds.
type Pairs struct {
	Local, SSH             []float64
	LocalMedian, SSHMedian float64
	DiffMedian             float64 // the median of each pair's SSH minus Local
}

func main() {
	uri := flag.String("uri", "", "the Podman service")
	local := flag.String("local", "", "the service to compare with (-do pairs)")
	runtimeDir := flag.String("runtime-dir", "", "the caller's runtime directory")
	image := flag.String("image", "", "image to run")
	do := flag.String("do", "probe", "probe or pairs")
	n := flag.Int("n", 7, "pairs")
	connectOnly := flag.Bool("connect-only", false, "-do pairs times Connect and Close alone")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	where := func(u string) engine.Where {
		return engine.Where{URI: u, RuntimeDir: *runtimeDir, SSH: engine.SSHFromEnv(os.Getenv)}
	}
	var out any
	switch *do {
	case "probe":
		c, err := engine.Connect(ctx, where(*uri))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		p, err := probe(ctx, c, *image)
		c.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out = p
	case "hold":
		if _, err := engine.Connect(ctx, where(*uri)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Println("connected")
		<-ctx.Done()
		os.Exit(1)
	case "pairs":
		var p Pairs
		for i := 0; i < *n; i++ {
			for _, side := range []struct {
				uri string
				to  *[]float64
			}{{*local, &p.Local}, {*uri, &p.SSH}} {
				start := time.Now()
				if err := trivial(ctx, where(side.uri), *image, i, *connectOnly); err != nil {
					fmt.Fprintf(os.Stderr, "%s: %v\n", side.uri, err)
					os.Exit(1)
				}
				*side.to = append(*side.to, float64(time.Since(start).Microseconds())/1000)
			}
		}
		p.LocalMedian, p.SSHMedian = median(p.Local), median(p.SSH)
		var diffs []float64
		for i := range p.Local {
			diffs = append(diffs, p.SSH[i]-p.Local[i])
		}
		p.DiffMedian = median(diffs)
		out = p
	default:
		fmt.Fprintf(os.Stderr, "-do %q: probe or pairs\n", *do)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func probe(ctx context.Context, c *engine.Conn, image string) (Probe, error) {
	p := Probe{Version: c.Version.String(), Local: c.Locality().Local, Why: c.Locality().Why}
	info, err := c.Info(ctx)
	if err != nil {
		return p, fmt.Errorf("info: %w", err)
	}
	p.Hostname = info.Host.Hostname
	name := fmt.Sprintf("aisb-sshtest-%d", os.Getpid())
	s := specgen.NewSpecGenerator(image, false)
	s.Name = name + "-net"
	// Read while it runs: a copy out of a container that has just exited
	// races Podman's cleanup of its mount (an empty archive, locally too).
	s.Command = []string{"sh", "-c", "awk -F: 'NR > 2 { gsub(/ /, \"\", $1); printf \"%s \", $1 }' /proc/net/dev > /tmp/i && mv /tmp/i /tmp/ifaces && exec sleep 120"}
	s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	if _, err := c.ContainerCreate(ctx, s); err != nil {
		return p, fmt.Errorf("create: %w", err)
	}
	defer engine.Remove(context.Background(), c, s.Name)
	if err := c.ContainerStart(ctx, s.Name); err != nil {
		return p, fmt.Errorf("start: %w", err)
	}
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var buf bytes.Buffer
		if lastErr = c.ContainerCopyOut(ctx, s.Name, "/tmp/ifaces", &buf); lastErr != nil {
			continue
		}
		tr := tar.NewReader(&buf)
		if _, lastErr = tr.Next(); lastErr != nil {
			continue
		}
		b, _ := io.ReadAll(tr)
		p.Interfaces = string(b)
		break
	}
	if p.Interfaces == "" {
		return p, fmt.Errorf("copy out the interfaces: %v", lastErr)
	}
	if err := engine.Remove(ctx, c, s.Name); err != nil {
		return p, err
	}

	s2 := specgen.NewSpecGenerator(image, false)
	s2.Name = name
	s2.Command = []string{"true"}
	if _, err := c.ContainerCreate(ctx, s2); err != nil {
		return p, fmt.Errorf("create: %w", err)
	}
	p.Created = true
	if err := engine.Remove(ctx, c, name); err != nil {
		return p, err
	}
	_, err = c.ContainerInspect(ctx, name)
	p.Removed = engine.IsNotFound(err)
	return p, nil
}

// trivial is the start-up path of a session at its smallest: connect, one
// container created, started, waited for and removed, disconnect.
func trivial(ctx context.Context, w engine.Where, image string, i int, connectOnly bool) error {
	c, err := engine.Connect(ctx, w)
	if err != nil {
		return err
	}
	defer c.Close()
	if connectOnly {
		return nil
	}
	name := fmt.Sprintf("aisb-sshpair-%d-%d", os.Getpid(), i)
	s := specgen.NewSpecGenerator(image, false)
	s.Name = name
	s.Command = []string{"true"}
	if _, err := c.ContainerCreate(ctx, s); err != nil {
		return err
	}
	defer engine.Remove(context.Background(), c, name)
	if err := c.ContainerStart(ctx, name); err != nil {
		return err
	}
	code, err := c.ContainerWait(ctx, name)
	if err == nil && code != 0 {
		err = errors.New("true did not exit 0")
	}
	return err
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
