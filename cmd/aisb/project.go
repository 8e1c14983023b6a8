package main

import (
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/project"
)

// projectFlag names the project directory without cd, for every command
// that reads the project's file.
func projectFlag() cli.Flag {
	return &cli.StringFlag{Name: "project", Aliases: []string{"C"}, Usage: "the project directory `DIR` (default: the current directory)"}
}

// projectDir is the project directory: --project/-C, else the current
// directory, with links resolved so that every command names it alike.
func projectDir(c *cli.Context) (string, error) {
	dir := ""
	if c != nil {
		dir = c.String("project")
	}
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return "", fmt.Errorf("find the project directory: %w", err)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("project directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("project directory: %w", err)
	}
	return real, nil
}

// mountableProjectDir is projectDir, refused when mounting it would hand
// the agent the user's home or aisb's own files.
func mountableProjectDir(c *cli.Context, e *appEnv) (string, error) {
	if e.pathsErr != nil {
		return "", exitWith(config.ExitConfig, e.pathsErr)
	}
	dir, err := projectDir(c)
	if err != nil {
		return "", err
	}
	return project.Check(dir, protected(e))
}

// protected lists what no project directory may be or hold.
func protected(e *appEnv) project.Protected {
	p := project.Protected{Homes: []string{e.home}}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		p.Homes = append(p.Homes, u.HomeDir)
	}
	p.Dirs = []project.Guarded{
		{Path: e.paths.Config, What: "aisb's configuration and trust store"},
		{Path: e.paths.State, What: "aisb's state"},
		{Path: e.paths.Runtime, What: "your runtime directory, with the Podman socket"},
	}
	if u, err := url.Parse(e.where.URI); err == nil && u.Scheme == "unix" && strings.HasPrefix(u.Path, "/") {
		p.Dirs = append(p.Dirs, project.Guarded{Path: u.Path, What: "the Podman socket"})
	}
	return p
}
