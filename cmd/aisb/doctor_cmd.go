package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/doctor"
)

func doctorCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "measure this host's isolation live before you trust it",
		Description: `Checks Podman and its rootless network helper, the rootless setup, whether
limits can be enforced, that a generated gate config parses, and then, with
real containers against targets doctor creates on loopback: the table
installs with NET_ADMIN and not without it, the mapped host loopback reaches
the gate and nothing else, UDP/DNS and raw sockets are blocked, and the agent
cannot change the table. Each sandbox check is paired with a control run
without the sandbox. Exit 1 on any FAIL.

EXAMPLE:
   aisb doctor
   AISB_BASE_IMAGE=localhost/aisb-base:trixie aisb doctor --json`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per check on stdout"},
			&cli.StringFlag{Name: "network-helper", Usage: "check pasta or slirp4netns (default: the one aisb run would use)"},
			baseImageFlag(),
			verboseFlag(),
		},
		Action: func(c *cli.Context) error {
			r, _, err := resolveConfig(c, e, resolve{}, config.Overrides{BaseImage: c.String("base-image")})
			if err != nil {
				return err
			}
			rep := doctor.Run(c.Context, doctor.Options{BaseImage: r.Config.Sandbox.BaseImage, Helper: c.String("network-helper"), Entrypoint: e.entrypoint,
				GateHelper: e.gateHelper, Where: e.where, Paths: e.paths, Logf: e.logf, Builds: e.builds(c)})
			if c.Bool("json") {
				if err := encodeEach(c.App.Writer, rep.Checks); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				for _, ch := range rep.Checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Status, ch.Name, ch.Reason)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if rep.Failed() {
				return exitWith(1, errors.New("doctor: at least one check failed"))
			}
			return nil
		},
	}
}
