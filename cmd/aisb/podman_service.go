package main

import (
	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/engine"
)

// podmanServiceCommand is the keeper of aisb's shared Podman service,
// started detached by engine.Connect (see engine/shared.go).
func podmanServiceCommand() *cli.Command {
	return &cli.Command{
		Name:   "internal-podman-service",
		Hidden: true,
		Usage:  "run aisb's shared Podman service until no aisb has used it for 10 minutes",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Required: true},
			&cli.DurationFlag{Name: "idle", Value: engine.SharedIdle},
		},
		Action: func(c *cli.Context) error {
			return engine.Keep(c.Context, c.String("socket"), c.Duration("idle"), c.App.Writer)
		},
	}
}
