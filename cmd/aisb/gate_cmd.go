package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/config"
	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/image"
	"github.com/aisb-dev/aisb/session"
	"github.com/aisb-dev/aisb/state"
)

var gateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

func gateCommand() *cli.Command {
	return &cli.Command{
		Name:  "gate",
		Usage: "manage long-lived gates that sessions can share",
		Description: `A session normally starts its own gate and removes it at the end. A
long-lived gate is the one exception: started once, used by any session that
names it with --gate, audited under its name.

EXAMPLE:
   aisb gate up --allow api.anthropic.com shared
   aisb run --gate shared
   aisb gate status
   aisb gate down shared`,
		Subcommands: []*cli.Command{
			{
				Name:      "up",
				Usage:     "start the long-lived gate NAME with your configured allowlist (plus --allow)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "allow", Usage: "also allow `HOST`; repeatable"},
					baseImageFlag(),
				},
				Action: gateUp,
			},
			{Name: "down", Usage: "stop and remove the long-lived gate NAME", ArgsUsage: "NAME", Action: gateDown},
			{
				Name:   "status",
				Usage:  "list running gates",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per gate on stdout"}},
				Action: gateStatus,
			},
		},
	}
}

func gateName(c *cli.Context) (string, error) {
	name := c.Args().First()
	if c.NArg() != 1 || !gateNameRE.MatchString(name) {
		return "", exitWith(2, fmt.Errorf("gate %s: give one NAME of lower-case letters, digits and hyphens", c.Command.Name))
	}
	return name, nil
}

func connectAndReap(ctx context.Context, c *cli.Context) (*engine.Conn, error) {
	conn, err := engine.Connect(ctx)
	if err != nil {
		return nil, err
	}
	session.Reap(conn, c.App.ErrWriter)
	return conn, nil
}

func gateUp(c *cli.Context) error {
	name, err := gateName(c)
	if err != nil {
		return err
	}
	// A shared gate takes the user's configuration only, never a project's.
	r, _, err := resolveConfig(c, false, config.Overrides{Allow: c.StringSlice("allow"), BaseImage: c.String("base-image")})
	if err != nil {
		return err
	}
	conn, err := connectAndReap(c.Context, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	gdir, err := state.GateDir(name)
	if err != nil {
		return err
	}
	img, _, err := image.Ensure(conn, gate.ImageSpec(r.Config.Sandbox.BaseImage), c.App.ErrWriter)
	if err != nil {
		return err
	}
	if _, err := gate.Find(conn, name, gdir); err == nil {
		return fmt.Errorf("gate up: %s is already running; aisb gate down %s first", name, name)
	}
	engine.Remove(conn, gate.ContainerName(name))
	g, err := gate.Start(conn, gate.Options{Session: name, Dir: gdir, Image: img, Allowlist: r.Allowlist, DNS: r.Config.Network.Resolvers()})
	if err != nil {
		return err
	}
	// The audit follower outlives this command, as the gate does.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	f := exec.Command(self, "internal-follow", "--gate", name, "--port", strconv.Itoa(g.Port))
	f.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := f.Start(); err != nil {
		g.Stop(conn)
		return fmt.Errorf("gate up: start the audit follower: %w", err)
	}
	os.WriteFile(filepath.Join(gdir, "follower.pid"), []byte(strconv.Itoa(f.Process.Pid)), 0o600)
	fmt.Fprintf(c.App.Writer, "gate %s listening on %s with %d allowed hosts\n", name, g.Addr(), len(r.Allowlist))
	return nil
}

func gateDown(c *cli.Context) error {
	name, err := gateName(c)
	if err != nil {
		return err
	}
	conn, err := connectAndReap(c.Context, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := engine.Remove(conn, gate.ContainerName(name)); err != nil {
		return err
	}
	if gdir, err := state.GateDir(name); err == nil {
		if b, err := os.ReadFile(filepath.Join(gdir, "follower.pid")); err == nil {
			if pid, err := strconv.Atoi(string(b)); err == nil {
				syscall.Kill(pid, syscall.SIGTERM)
			}
			os.Remove(filepath.Join(gdir, "follower.pid"))
		}
	}
	fmt.Fprintf(c.App.Writer, "gate %s removed\n", name)
	return nil
}

type gateInfo struct {
	Name      string `json:"name"`
	Session   string `json:"session"`
	LongLived bool   `json:"long_lived"`
	State     string `json:"state"`
	Container string `json:"container"`
}

func gateStatus(c *cli.Context) error {
	conn, err := connectAndReap(c.Context, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	list, err := containers.List(conn.Ctx, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"label": {gate.LabelKind + "=gate"}}))
	if err != nil {
		return fmt.Errorf("gate status: %w", err)
	}
	var infos []gateInfo
	for _, ctr := range list {
		_, owned := ctr.Labels[gate.LabelOwner]
		infos = append(infos, gateInfo{Name: ctr.Labels[gate.LabelSession], Session: ctr.Labels[gate.LabelSession],
			LongLived: !owned, State: ctr.State, Container: ctr.Names[0]})
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, i := range infos {
			enc.Encode(i)
		}
		return nil
	}
	if len(infos) == 0 {
		fmt.Fprintln(c.App.Writer, "no gates running")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSTATE\tCONTAINER")
	for _, i := range infos {
		kind := "session"
		if i.LongLived {
			kind = "long-lived"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.Name, kind, i.State, i.Container)
	}
	return tw.Flush()
}

func followCommand() *cli.Command {
	return &cli.Command{
		Name:   "internal-follow",
		Hidden: true,
		Usage:  "follow a long-lived gate's access log into its audit file while it listens",
		Flags:  []cli.Flag{&cli.StringFlag{Name: "gate", Required: true}, &cli.IntFlag{Name: "port", Required: true}},
		Action: func(c *cli.Context) error {
			gdir, err := state.GateDir(c.String("gate"))
			if err != nil {
				return err
			}
			g := &gate.Gate{Session: c.String("gate"), Port: c.Int("port"), Dir: gdir}
			ctx, cancel := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
			defer cancel()
			stop, err := session.FollowAudit(ctx, g)
			if err != nil {
				return err
			}
			defer stop()
			// Follow for as long as the gate listens, or until gate down.
			for misses := 0; misses < 3 && ctx.Err() == nil; {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				if gate.Listening(g.Port) {
					misses = 0
				} else {
					misses++
				}
			}
			cancel()
			return nil
		},
	}
}
