package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

func trustCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:      "trust",
		Usage:     "let this project's .aisb.toml widen the sandbox, exactly as you see it now",
		ArgsUsage: "[DIR]",
		Description: `A project's .aisb.toml is written by whoever wrote the repository, so until
you trust it, it may only narrow what the sandbox can reach. trust reads the
file once and shows exactly the bytes it would record (bytes outside printable
ASCII as \xHH), their sha256 and what they widen beyond your configuration,
then asks on the terminal. Without a terminal it needs --sha256 with the hash
of the content you reviewed. Any later change makes the file untrusted again.
It refuses while a session of the project runs: its agent could swap the
file between your review and the record.

EXAMPLE:
   aisb trust
   aisb trust --sha256 3f1c…   # non-interactive: the hash of what you reviewed
   aisb trust --list
   aisb trust --revoke`,
		Flags: []cli.Flag{
			projectFlag(),
			&cli.StringFlag{Name: "sha256", Usage: "trust the file only if its content has this `HASH` (hex, from your review)"},
			&cli.BoolFlag{Name: "list", Usage: "list the trusted files and whether each still has its trusted content"},
			&cli.BoolFlag{Name: "revoke", Usage: "forget the trust of the project's file, or of FILE"},
		},
		Action: func(c *cli.Context) error { return trustAction(c, e) },
	}
}

func trustAction(c *cli.Context, e *appEnv) error {
	if e.pathsErr != nil {
		return exitWith(config.ExitConfig, e.pathsErr)
	}
	store := e.paths.TrustStore()
	switch {
	case c.Bool("list"):
		return trustList(c, store)
	case c.Bool("revoke"):
		return trustRevoke(c, store)
	}
	if c.NArg() > 1 {
		return exitWith(2, errors.New("trust takes at most one DIR"))
	}
	dir, err := trustDir(c)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, config.ProjectFileName)
	if err := refuseWhileRunning(e, dir); err != nil {
		return err
	}
	// Read once: what is shown, hashed and recorded are the same bytes.
	f, err := config.ReadProjectFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return exitWith(config.ExitConfig, fmt.Errorf("trust: no %s in %s", config.ProjectFileName, termsafe.Name(dir)))
	}
	if err != nil {
		return exitWith(config.ExitConfig, fmt.Errorf("trust: %w", err))
	}
	sum := config.Digest(f.Content)
	widens, err := config.Widens(e.paths.UserConfig(), f)
	if err != nil {
		return exitWith(config.ExitConfig, fmt.Errorf("trust: %w", err))
	}
	showTrust(c.App.ErrWriter, path, f.Content, sum, widens)

	if want := c.String("sha256"); want != "" {
		want = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(want), "sha256:"))
		if want != sum {
			return exitWith(config.ExitConfig, fmt.Errorf("trust: %s has sha256 %s now, not the %s you gave: it is not the content you reviewed; nothing was trusted",
				termsafe.Name(path), sum, termsafe.Quote(want)))
		}
	} else if in, ok := c.App.Reader.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
		fmt.Fprint(c.App.ErrWriter, "Trust exactly this content? [y/N] ")
		answer, _ := bufio.NewReader(io.LimitReader(in, 256)).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return exitWith(1, errors.New("trust: not trusted"))
		}
	} else {
		return exitWith(config.ExitConfig, fmt.Errorf("trust: no terminal to confirm on; review the content above and run `aisb trust --sha256 %s` if it is what you reviewed", sum))
	}
	if err := config.Trust(store, path, f.Content); err != nil {
		return exitWith(config.ExitConfig, fmt.Errorf("trust: %w", err))
	}
	fmt.Fprintf(c.App.Writer, "trusted %s with sha256 %s\n", termsafe.Name(path), sum)
	return nil
}

// trustDir is the DIR argument, else --project, else the current directory,
// links resolved.
func trustDir(c *cli.Context) (string, error) {
	arg := c.Args().First()
	if arg == "" {
		return projectDir(c)
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("trust: %w", err)
	}
	return dir, nil
}

// refuseWhileRunning refuses to trust while a session mounts dir (or a
// directory above it): its agent can rewrite the file between the user's
// review and the record.
func refuseWhileRunning(e *appEnv, dir string) error {
	running, err := e.paths.RunningSessions()
	if err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	for _, r := range running {
		if r.Project == dir || strings.HasPrefix(dir, strings.TrimSuffix(r.Project, "/")+"/") {
			return exitWith(1, fmt.Errorf("trust: session %s is running with %s mounted: its agent can rewrite %s while you review it; end the session, then review and trust the file",
				termsafe.Name(r.ID), termsafe.Name(r.Project), config.ProjectFileName))
		}
	}
	return nil
}

func showTrust(w io.Writer, path string, content []byte, sum string, widens []string) {
	shown, escaped := termsafe.Content(content)
	fmt.Fprintf(w, "%s, %d bytes, exactly:\n", termsafe.Name(path), len(content))
	fmt.Fprintln(w, "-------- begin --------")
	fmt.Fprint(w, shown)
	if !strings.HasSuffix(shown, "\n") {
		fmt.Fprint(w, "\n(no newline at the end)\n")
	}
	fmt.Fprintln(w, "--------- end ---------")
	if escaped > 0 {
		fmt.Fprintf(w, "%d bytes outside printable ASCII are shown as \\xHH\n", escaped)
	}
	fmt.Fprintf(w, "sha256: %s\n", sum)
	if len(widens) == 0 {
		fmt.Fprintln(w, "Compared with your configuration it widens nothing (it only narrows).")
	} else {
		fmt.Fprintln(w, "Trusted, it widens your configuration by:")
		for _, s := range widens {
			fmt.Fprintf(w, "  %s\n", termsafe.Printable(s))
		}
	}
}

func trustList(c *cli.Context, store string) error {
	entries, warnings, err := config.ReadTrustStore(store)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.App.ErrWriter, "aisb: %s\n", termsafe.Printable(w))
	}
	if len(entries) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no trusted project files")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHA256\tNOW\tFILE")
	for _, e := range entries {
		now := "same"
		if b, err := safefile.Read(e.Path, config.MaxFileSize); errors.Is(err, fs.ErrNotExist) {
			now = "missing"
		} else if err != nil {
			now = "unreadable"
		} else if config.Digest(b) != e.SHA256 {
			now = "changed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.SHA256, now, termsafe.Name(e.Path))
	}
	return tw.Flush()
}

func trustRevoke(c *cli.Context, store string) error {
	var path string
	if arg := c.Args().First(); arg != "" {
		abs, err := filepath.Abs(arg)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			abs = filepath.Join(abs, config.ProjectFileName)
		}
		path = abs
		if d, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			path = filepath.Join(d, filepath.Base(abs))
		}
	} else {
		dir, err := projectDir(c)
		if err != nil {
			return err
		}
		path = filepath.Join(dir, config.ProjectFileName)
	}
	n, err := config.Revoke(store, path)
	if err != nil {
		return err
	}
	if n == 0 {
		return exitWith(1, fmt.Errorf("trust --revoke: %s is not trusted", termsafe.Name(path)))
	}
	fmt.Fprintf(c.App.Writer, "revoked the trust of %s\n", termsafe.Name(path))
	return nil
}
