package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/progs"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

func imageCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "image",
		Usage: "build the sandbox and gate images ahead of time, or list them",
		Description: `Images are tagged by a hash of everything that went into them (Containerfile,
entrypoint binary, base image ID, harness and its version): the same inputs
never rebuild, and any change always does.

EXAMPLE:
   aisb image build --harness pi
   AISB_BASE_IMAGE=localhost/aisb-base:trixie aisb image build
   aisb image ls`,
		Subcommands: []*cli.Command{
			{
				Name:  "build",
				Usage: "build (if needed) the sandbox image for a harness, and the gate image",
				Flags: []cli.Flag{
					projectFlag(),
					&cli.StringFlag{Name: "harness", Usage: "pi, claude, codex, opencode or shell (default: sandbox.harness)"},
					baseImageFlag(),
					verboseFlag(),
				},
				Action: func(c *cli.Context) error { return imageBuild(c, e) },
			},
			{
				Name:   "ls",
				Usage:  "list the images aisb built",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per image on stdout"}},
				Action: func(c *cli.Context) error { return imageList(c, e) },
			},
		},
	}
}

func imageBuild(c *cli.Context, e *appEnv) error {
	r, _, err := resolveConfig(c, e, resolve{project: true}, config.Overrides{Harness: c.String("harness"), BaseImage: c.String("base-image")})
	if err != nil {
		return err
	}
	h, err := harness.Lookup(r.Config.Sandbox.Harness)
	if err != nil {
		return err
	}
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	arch, err := conn.Arch(c.Context)
	if err != nil {
		return err
	}
	ep, err := progs.Find(progs.Entrypoint, arch, e.entrypoint)
	if err != nil {
		return err
	}
	epFile, err := image.Digest(ep, e.paths.DigestDir())
	if err != nil {
		return err
	}
	for _, spec := range []image.Spec{sandbox.ImageSpec(r.Config.Sandbox.BaseImage, h, epFile), gate.ImageSpec(r.Config.Sandbox.BaseImage)} {
		start := time.Now()
		tag, built, err := image.Ensure(conn, spec, image.Build{LockDir: e.paths.LockDir(), Output: e.builds(c), Logf: e.logf})
		if err != nil {
			return err
		}
		state := "up to date"
		if built {
			state = "built in " + time.Since(start).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(c.App.Writer, "%s  %s\n", tag, state)
	}
	return nil
}

func imageList(c *cli.Context, e *appEnv) error {
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	list, err := image.List(conn)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return encodeEach(c.App.Writer, list)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tCREATED\tSIZE")
	for _, img := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d MB\n", img.Tag, img.Created.Format("2006-01-02 15:04"), img.Size/1e6)
	}
	return tw.Flush()
}
