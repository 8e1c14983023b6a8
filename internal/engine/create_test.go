package engine

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/specgen"
)

// fakeService answers the bindings' ping and container creates on a UNIX
// socket and records how many creates it ever had in flight at once.
type fakeService struct {
	uri            string
	inFlight, most atomic.Int32
	creates        atomic.Int32
}

func newFakeService(t *testing.T) *fakeService {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeService{uri: "unix://" + sock}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.4.2")
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			w.Write([]byte("OK"))
		case strings.HasSuffix(r.URL.Path, "/libpod/containers/create"):
			n := f.inFlight.Add(1)
			for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			f.inFlight.Add(-1)
			f.creates.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"Id":"c%d","Warnings":[]}`, f.creates.Load())
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return f
}

func fakeConn(t *testing.T, uri, lockDir string) *Conn {
	t.Helper()
	ctx, err := bindings.NewConnection(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	return &Conn{Ctx: ctx, URI: uri, lockDir: lockDir}
}

// createAll runs n creates at the same instant through create.
func createAll(t *testing.T, n int, create func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := create(i); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
}

func testSpec(i int) *specgen.SpecGenerator {
	s := specgen.NewSpecGenerator("localhost/x", false)
	s.Name = fmt.Sprintf("c%d", i)
	return s
}

// TestCreateOneAtATimeInProcess: creates from goroutines of one process
// reach the service one at a time, through a shared service's Conn and a
// private one alike (a session's gate and sandbox started together); the
// control without Create shows the service sees concurrent creates.
func TestCreateOneAtATimeInProcess(t *testing.T) {
	control := newFakeService(t)
	c := fakeConn(t, control.uri, t.TempDir())
	createAll(t, 8, func(i int) error { _, err := containers.CreateWithSpec(c.Ctx, testSpec(i), nil); return err })
	if control.most.Load() < 2 {
		t.Fatalf("control: the fake service never saw two creates at once (most %d); the test cannot see a race", control.most.Load())
	}
	for _, private := range []bool{false, true} {
		f := newFakeService(t)
		c := fakeConn(t, f.uri, t.TempDir())
		if private {
			c.private = &exec.Cmd{} // a service of this process: no file lock, the mutex alone
		}
		// Several Conns to one service, as a session holds one and a
		// gate's reconnect another.
		c2 := *c
		createAll(t, 8, func(i int) error {
			conn := c
			if i%2 == 1 {
				conn = &c2
			}
			_, err := conn.ContainerCreate(context.Background(), testSpec(i))
			return err
		})
		if f.creates.Load() != 8 || f.most.Load() != 1 {
			t.Errorf("private=%v: %d creates, at most %d at once; want 8, 1", private, f.creates.Load(), f.most.Load())
		}
	}
}

// TestCreateOneAtATimeAcrossProcesses: aisb processes sharing a service
// (and the user's runtime directory) create one at a time.
func TestCreateOneAtATimeAcrossProcesses(t *testing.T) {
	// Control: the same processes creating without Create overlap.
	if most, _ := createFromProcesses(t, "raw"); most < 2 {
		t.Fatalf("control: the fake service never saw two creates at once (most %d); the test cannot see a race", most)
	}
	most, creates := createFromProcesses(t, "engine")
	if creates != 4*5 || most != 1 {
		t.Errorf("%d creates, at most %d at once; want %d, 1", creates, most, 4*5)
	}
}

// createFromProcesses runs 4 processes creating 5 containers each at once
// against one fake service, through Create (mode "engine") or straight
// (mode "raw"), and returns the most creates in flight and their number.
func createFromProcesses(t *testing.T, mode string) (most, creates int) {
	f := newFakeService(t)
	lockDir := t.TempDir()
	const procs, each = 4, 5
	var cmds []*exec.Cmd
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "AISB_ENGINE_CREATE_HELPER="+f.uri, "AISB_ENGINE_CREATE_LOCKDIR="+lockDir, "AISB_ENGINE_CREATE_N="+strconv.Itoa(each), "AISB_ENGINE_CREATE_MODE="+mode)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("helper: %s", out.String())
			}
		})
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v", err)
		}
	}
	return int(f.most.Load()), int(f.creates.Load())
}

// TestMain lets the test binary serve as another aisb process creating
// containers (TestCreateOneAtATimeAcrossProcesses), as a fake podman and
// as the shared service's keeper (shared_test.go).
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "podman" {
		fakePodman()
	}
	if os.Getenv("AISB_ENGINE_TEST_KEEPER") != "" {
		fakeKeeper()
	}
	if uri := os.Getenv("AISB_ENGINE_CREATE_HELPER"); uri != "" {
		ctx, err := bindings.NewConnection(context.Background(), uri)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c := &Conn{Ctx: ctx, URI: uri, lockDir: os.Getenv("AISB_ENGINE_CREATE_LOCKDIR")}
		n, _ := strconv.Atoi(os.Getenv("AISB_ENGINE_CREATE_N"))
		var wg sync.WaitGroup
		failed := atomic.Bool{}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if os.Getenv("AISB_ENGINE_CREATE_MODE") == "raw" {
					_, err = containers.CreateWithSpec(c.Ctx, testSpec(i), nil)
				} else {
					_, err = c.ContainerCreate(context.Background(), testSpec(i))
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed.Store(true)
				}
			}()
		}
		wg.Wait()
		if failed.Load() {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
