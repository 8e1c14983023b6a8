package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/config"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/harness"
	"github.com/aisb-dev/aisb/image"
	"github.com/aisb-dev/aisb/session"
)

func imageCommand() *cli.Command {
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
					&cli.StringFlag{Name: "harness", Usage: "pi, claude, codex, opencode or shell (default: sandbox.harness)"},
					baseImageFlag(),
				},
				Action: imageBuild,
			},
			{Name: "ls", Usage: "list the images aisb built", Action: imageList},
		},
	}
}

func imageBuild(c *cli.Context) error {
	r, _, err := resolveConfig(c, true, config.Overrides{Harness: c.String("harness"), BaseImage: c.String("base-image")})
	if err != nil {
		return err
	}
	h, err := harness.Lookup(r.Config.Sandbox.Harness)
	if err != nil {
		return err
	}
	ep, err := session.FindEntrypoint()
	if err != nil {
		return err
	}
	epBytes, err := os.ReadFile(ep)
	if err != nil {
		return err
	}
	conn, err := connectAndReap(c.Context, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, spec := range []image.Spec{session.ImageSpec(r.Config.Sandbox.BaseImage, h, epBytes), gate.ImageSpec(r.Config.Sandbox.BaseImage)} {
		start := time.Now()
		tag, built, err := image.Ensure(conn, spec, c.App.ErrWriter)
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

func imageList(c *cli.Context) error {
	conn, err := connectAndReap(c.Context, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	list, err := images.List(conn.Ctx, new(images.ListOptions).WithFilters(map[string][]string{"label": {image.Label}}))
	if err != nil {
		return fmt.Errorf("image ls: %w", err)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tCREATED\tSIZE")
	for _, img := range list {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, "localhost/aisb-") {
				fmt.Fprintf(tw, "%s\t%s\t%d MB\n", tag, time.Unix(img.Created, 0).Format("2006-01-02 15:04"), img.Size/1e6)
			}
		}
	}
	return tw.Flush()
}
