package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/progs"
	"github.com/aisb-dev/aisb/internal/reaper"
)

var gateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

func gateCommand(e *appEnv) *cli.Command {
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
					&cli.StringSliceFlag{Name: "allow-ssh", Usage: "also let SSH reach port 22 of `HOST`; repeatable"},
					baseImageFlag(),
					verboseFlag(),
				},
				Action: func(c *cli.Context) error { return gateUp(c, e) },
			},
			{Name: "down", Usage: "stop and remove the long-lived gate NAME", ArgsUsage: "NAME", Action: func(c *cli.Context) error { return gateDown(c, e) }},
			{
				Name:   "status",
				Usage:  "list running gates",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per gate on stdout"}},
				Action: func(c *cli.Context) error { return gateStatus(c, e) },
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

// connectAny connects to Podman wherever it is, for a command that works
// through its API alone (docs/remote.md). What dead sessions left is swept
// on a local engine only: the sweep judges containers by whether their
// owner's process lives on this host, which an engine elsewhere's are not.
func connectAny(c *cli.Context, e *appEnv) (*engine.Conn, error) {
	if e.pathsErr != nil {
		return nil, e.pathsErr
	}
	conn, err := engine.Connect(c.Context, e.where)
	if err != nil {
		return nil, err
	}
	if conn.Locality().Local {
		reaper.Reap(conn, e.logf)
	} else if e.where.Trace != nil {
		e.where.Trace(fmt.Sprintf("engine at %s is not local: this command goes through its API alone; no sweep of dead sessions", conn.Address()))
	}
	return conn, nil
}

// engineWhere is how a long-lived gate's record names the engine conn:
// "" for a local one, else its URI.
func engineWhere(conn *engine.Conn) string {
	if conn.Locality().Local {
		return ""
	}
	return conn.Address()
}

func gateUp(c *cli.Context, e *appEnv) error {
	name, err := gateName(c)
	if err != nil {
		return err
	}
	// A shared gate takes the user's configuration only, never a project's.
	r, _, err := resolveConfig(c, e, resolve{}, config.Overrides{Allow: c.StringSlice("allow"), AllowSSH: c.StringSlice("allow-ssh"), BaseImage: c.String("base-image")})
	if err != nil {
		return err
	}
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	img, _, err := image.Ensure(conn, gate.ImageSpec(r.Config.Sandbox.BaseImage), image.Build{LockDir: e.paths.LockDir(), Output: e.builds(c), Logf: e.logf})
	if err != nil {
		return err
	}
	// The audit follower outlives this command, as the gate does.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o := gate.UpOptions{Name: name, Dir: e.paths.GateDir(name), Image: img, Allowlist: r.Allowlist, SSHHosts: r.SSHHosts,
		DNS: r.Config.Network.Resolvers(), Follower: followerArgv(self, name, r.Config.Logs), Engine: engineWhere(conn)}
	where := "on this host"
	if o.Engine != "" {
		// Through the API alone (gate/longremote.go): the probe picks its
		// ports on the engine host's loopback.
		arch, err := conn.Arch(c.Context)
		if err != nil {
			return err
		}
		probe, err := progs.Find(progs.GateHelper, arch, e.gateHelper)
		if err != nil {
			return err
		}
		o.Remote = &gate.Remote{Probe: probe}
		where = "on the engine's host (" + o.Engine + ", not local)"
	}
	g, err := gate.Up(conn, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "gate %s listening on %s %s with %d allowed hosts and %d SSH hosts\n", name, g.Addr(), where, len(r.Allowlist), len(r.SSHHosts))
	return nil
}

func gateDown(c *cli.Context, e *appEnv) error {
	name, err := gateName(c)
	if err != nil {
		return err
	}
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := gate.Down(conn, name, e.paths.GateDir(name), engineWhere(conn)); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "gate %s removed\n", name)
	return nil
}

func gateStatus(c *cli.Context, e *appEnv) error {
	// Listing gate containers is the API's alone: any engine.
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	infos, err := gate.List(conn)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return encodeEach(c.App.Writer, infos)
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

func followCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:   "internal-follow",
		Hidden: true,
		Usage:  "follow a long-lived gate's access log into its audit file while it listens",
		Flags: []cli.Flag{&cli.StringFlag{Name: "gate", Required: true}, &cli.IntFlag{Name: "port", Required: true},
			&cli.Int64Flag{Name: "session-max"}, &cli.Int64Flag{Name: "total-max"},
			&cli.BoolFlag{Name: "remote", Usage: "the gate runs on CONTAINER_HOST, an engine that is not local: copy its logs through the API"}},
		Action: func(c *cli.Context) error {
			name := c.String("gate")
			g, err := gate.Running(gate.Known{Session: name, Dir: e.paths.GateDir(name), Port: c.Int("port")})
			if err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
			defer cancel()
			var conn *engine.Conn
			if c.Bool("remote") {
				// The copy of the logs goes first: the audit follower reads it.
				if conn, err = engine.Connect(ctx, e.where); err != nil {
					return err
				}
				defer conn.Close()
				if conn.Locality().Local {
					return fmt.Errorf("gate %s: --remote, but podman at %s is local", name, conn.Address())
				}
				if err := g.FollowRemote(conn); err != nil {
					return err
				}
			}
			lim := audit.AuditLimits{Session: c.Int64("session-max"), Total: c.Int64("total-max")}
			aud, err := audit.OpenAudit(e.paths.AuditDir(), name, lim)
			if err != nil {
				return err
			}
			stop := gate.FollowAudit(ctx, g, aud, e.logf)
			if conn != nil {
				// Alive is its container running (the engine host's
				// socket table is not this host's); once it is not, the
				// copy of its logs is completed, then the audit.
				for misses := 0; misses < 2 && ctx.Err() == nil; {
					select {
					case <-ctx.Done():
					case <-time.After(250 * time.Millisecond):
					}
					runs, err := g.Runs()
					switch {
					case err != nil:
						// The engine did not answer: nothing known.
					case runs:
						misses = 0
						if g.ResumeLogs() {
							e.logf("gate %s: the stream of its logs ended while it runs; resumed where the copy was", name)
						}
					default:
						misses++
					}
				}
				lerr := g.EndRemote(5 * time.Second)
				cancel()
				return errors.Join(lerr, stop(), aud.Close())
			}
			// A long-lived gate follows the host's addresses and on-link
			// prefixes; Podman is reached only when they change.
			go gate.WatchHost(ctx, g, gate.WatchEvery, func() error {
				conn, err := engine.Connect(ctx, e.local("a local gate's follower reconfigures it for this host's addresses"))
				if err != nil {
					return err
				}
				defer conn.Close()
				return gate.Reconfigure(conn, g)
			}, e.logf)
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
			return errors.Join(stop(), aud.Close())
		},
	}
}

// followerArgv starts a long-lived gate's audit follower with the user's
// audit bounds.
func followerArgv(self, name string, logs config.Logs) []string {
	sessionMax, totalMax := logs.Bytes()
	return []string{self, "internal-follow", "--gate", name,
		"--session-max", strconv.FormatInt(sessionMax, 10), "--total-max", strconv.FormatInt(totalMax, 10)}
}
