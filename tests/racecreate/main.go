// Command racecreate creates rootless keep-id containers many at once
// through one Podman service and reports any whose id mapping came out
// broken, for the test of the create race (tests/podmanrace_test.go).
//
// Each worker creates a container like aisb's (keep-id, started as the
// namespace's root), reads its uid map back, removes it, and repeats. A
// create whose map leaves container uid 0 unmapped is a hit (its start is
// tried, to record Podman's own error), and so is the service dying. With
// -mode engine creates go through Conn.ContainerCreate (aisb's path); with -mode
// raw straight to the bindings.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
)

// Result is what one run saw; printed as JSON on stdout.
type Result struct {
	Creates  int      // creates that returned
	Unmapped []string // containers created with container uid 0 unmapped, with their uid map
	StartErr string   // what starting the first of them said
	Died     bool     // the service stopped answering
	Errors   []string // other failed calls
	Seconds  float64
}

func main() {
	uri := flag.String("uri", "", "the Podman service")
	runtimeDir := flag.String("runtime-dir", "", "where Conn.ContainerCreate keeps its lock")
	image := flag.String("image", "", "image with /probe")
	mode := flag.String("mode", "engine", "engine (Conn.ContainerCreate) or raw (Conn.CreateUnlocked, no lock)")
	workers := flag.Int("workers", 16, "creates in flight at once")
	creates := flag.Int("creates", 64, "creates in all")
	untilHit := flag.Bool("until-hit", false, "stop at the first hit")
	budget := flag.Duration("budget", time.Minute, "stop after this long")
	flag.Parse()

	c, err := engine.Connect(context.Background(), engine.Where{URI: *uri, RuntimeDir: *runtimeDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	create := func(s *specgen.SpecGenerator) error { _, err := c.ContainerCreate(ctx, s); return err }
	if *mode == "raw" {
		create = func(s *specgen.SpecGenerator) error { _, err := c.CreateUnlocked(ctx, s); return err }
	}

	var (
		mu      sync.Mutex
		res     Result
		tickets = *creates
		stop    bool
	)
	t0 := time.Now()
	deadline := t0.Add(*budget)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if stop || tickets == 0 || time.Now().After(deadline) {
			return 0, false
		}
		tickets--
		return tickets, true
	}
	hit := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
		if *untilHit {
			stop = true
		}
	}
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, ok := take()
				if !ok {
					return
				}
				name := fmt.Sprintf("aisb-race-%d-%d", os.Getpid(), n)
				err := create(spec(*image, name))
				if err != nil {
					if !c.Alive() {
						hit(func() { res.Died = true })
						return
					}
					mu.Lock()
					res.Errors = append(res.Errors, "create: "+err.Error())
					mu.Unlock()
					continue
				}
				uidMap, err := uidMap(c, name)
				mu.Lock()
				res.Creates++
				if err != nil {
					res.Errors = append(res.Errors, "inspect: "+err.Error())
				}
				mu.Unlock()
				if err == nil && !mapsRoot(uidMap) {
					startErr := "started"
					if err := c.ContainerStart(ctx, name); err != nil {
						startErr = err.Error()
					}
					hit(func() {
						res.Unmapped = append(res.Unmapped, fmt.Sprintf("%s: %v", name, uidMap))
						if res.StartErr == "" {
							res.StartErr = startErr
						}
					})
				}
				if err := engine.Remove(ctx, c, name); err != nil && c.Alive() {
					mu.Lock()
					res.Errors = append(res.Errors, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if !res.Died && !c.Alive() {
		res.Died = true
	}
	res.Seconds = time.Since(t0).Seconds()
	json.NewEncoder(os.Stdout).Encode(res)
}

// spec is a container like aisb's sandbox: keep-id mapping the agent's ids,
// started as the namespace's root, no network.
func spec(image, name string) *specgen.SpecGenerator {
	s := specgen.NewSpecGenerator(image, false)
	s.Name = name
	s.Entrypoint = []string{"/probe"}
	s.Command = []string{"status"}
	s.User = "0:0"
	s.UserNS, _ = specgen.ParseUserNamespace("keep-id:uid=1000,gid=1000")
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.CapDrop = []string{"ALL"}
	return s
}

func uidMap(c *engine.Conn, name string) ([]string, error) {
	data, err := c.ContainerInspect(context.Background(), name)
	if err != nil {
		return nil, err
	}
	if data.HostConfig == nil {
		return nil, fmt.Errorf("inspect %s: no host config", name)
	}
	return data.HostConfig.IDMappings.UIDMap, nil
}

// mapsRoot reports whether a uid map ("ctr:host:size" entries) maps
// container uid 0.
func mapsRoot(m []string) bool {
	for _, e := range m {
		var ctr, host, size int
		if _, err := fmt.Sscanf(e, "%d:%d:%d", &ctr, &host, &size); err == nil && ctr == 0 && size > 0 {
			return true
		}
	}
	return false
}
