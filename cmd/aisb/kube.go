package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/kube"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/session"
)

func kubeCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:      "kube",
		Usage:     "render the session aisb run would run as Kubernetes manifests (a Pod, or an agent-sandbox SandboxTemplate)",
		ArgsUsage: "[-- COMMAND [ARGS...]]",
		Description: `Prints a ConfigMap (the session policy), a Secret (the gate's squid.conf,
with its tokens and your credentials' values, and its TLS files) and a Pod:
an init container that installs and verifies the network table (the only
container with CAP_NET_ADMIN), the gate (squid on the pod's loopback, the
only uid the table lets out) and the agent (uid 1000, no capability, no
privilege escalation), which runs only once the table is verified. The same
configuration, flags and narrowing of project files as aisb run. The output
holds secrets: write it with -o (mode 0600), never to a shared place.

The images: aisb image build prints the sandbox and gate images' tags;
push them to a registry your cluster pulls from and name them here.

EXAMPLE:
   aisb kube --sandbox-image reg.example/aisb-sandbox:TAG --gate-image reg.example/aisb-gate:TAG -o pod.yaml
   podman kube play pod.yaml        # or: kubectl apply -f pod.yaml
   podman logs aisb-PROJECT-gate | aisb kube audit`,
		Flags: []cli.Flag{
			projectFlag(),
			&cli.StringFlag{Name: "name", Usage: "the pod's `NAME` (a DNS label; default: aisb-<project directory>)"},
			&cli.StringFlag{Name: "namespace", Usage: "the manifests' `NAMESPACE` (default: none, kubectl's context)"},
			&cli.StringFlag{Name: "sandbox-image", Usage: "the sandbox `IMAGE` (aisb image build, pushed where the cluster pulls)"},
			&cli.StringFlag{Name: "gate-image", Usage: "the gate `IMAGE` (aisb image build, pushed where the cluster pulls)"},
			&cli.BoolFlag{Name: "template", Usage: "an agent-sandbox SandboxTemplate (extensions.agents.x-k8s.io/v1alpha1) instead of the Pod"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` (mode 0600) instead of stdout"},
			&cli.StringFlag{Name: "net", Usage: "network mode: allow only (a pod has its gate)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "also allow `HOST`; repeatable"},
			&cli.StringSliceFlag{Name: "env", Usage: "pass `NAME` from your environment, or set NAME=VALUE; repeatable"},
			&cli.StringSliceFlag{Name: "credential", Usage: "the gate sets the key in `NAME` on requests to its API host; the agent sees a placeholder; repeatable"},
			&cli.StringFlag{Name: "harness", Usage: "pi, claude, codex, opencode or shell"},
			&cli.StringFlag{Name: "memory", Usage: "the agent container's memory limit, e.g. 4g"},
			&cli.Float64Flag{Name: "cpus", Usage: "the agent container's CPU limit"},
		},
		Action: func(c *cli.Context) error { return kubeAction(c, e) },
		Subcommands: []*cli.Command{{
			Name:      "audit",
			Usage:     "convert a pod's gate log (kubectl logs POD -c gate) on stdin into aisb's JSON audit lines",
			ArgsUsage: " ",
			Action: func(c *cli.Context) error {
				skipped, err := audit.Convert(c.App.Reader, c.App.Writer)
				if skipped > 0 {
					e.logf("%d line(s) of squid's own log skipped", skipped)
				}
				return err
			},
		}},
	}
}

func kubeAction(c *cli.Context, e *appEnv) error {
	if c.String("sandbox-image") == "" || c.String("gate-image") == "" {
		return exitWith(config.ExitConfig, errors.New("command line: --sandbox-image and --gate-image are needed: the tags aisb image build prints, pushed to a registry your cluster pulls from"))
	}
	dir, err := mountableProjectDir(c, e)
	if err != nil {
		return err
	}
	var memory string
	if m := c.String("memory"); m != "" {
		n, err := config.ParseMemory(m)
		if err != nil {
			return exitWith(config.ExitConfig, fmt.Errorf("--memory: %w", err))
		}
		memory = fmt.Sprint(n)
	}
	r, src, err := resolveConfigIn(e, dir, resolve{project: true, harness: true}, config.Overrides{
		Mode: c.String("net"), Allow: c.StringSlice("allow"), Env: c.StringSlice("env"), Harness: c.String("harness"),
		Credentials: c.StringSlice("credential"),
	})
	if err != nil {
		return err
	}
	p, err := session.PlanPod(session.Options{Config: r, Paths: e.paths, ProjectDir: src.ProjectDir, Command: c.Args().Slice(), Logf: e.logf})
	if err != nil {
		if errors.Is(err, session.ErrNotInPod) {
			return exitWith(config.ExitConfig, err)
		}
		return err
	}
	if memory == "" && r.Config.Limits.Memory != "" {
		n, err := config.ParseMemory(r.Config.Limits.Memory)
		if err != nil {
			return exitWith(config.ExitConfig, fmt.Errorf("limits.memory: %w", err))
		}
		memory = fmt.Sprint(n)
	}
	cpus := c.Float64("cpus")
	if cpus == 0 {
		cpus = r.Config.Limits.CPUs
	}
	o := kube.Options{
		Name: c.String("name"), Namespace: c.String("namespace"),
		SandboxImage: c.String("sandbox-image"), GateImage: c.String("gate-image"),
		Command: p.Command, Env: p.Env, Policy: p.Policy, GateFiles: p.Gate.Files, GateCommand: p.Gate.Command,
		TTY: len(c.Args().Slice()) == 0, Memory: memory,
	}
	if cpus > 0 {
		o.CPUs = fmt.Sprintf("%dm", int64(cpus*1000))
	}
	if o.Name == "" {
		o.Name = kube.NameFor(src.ProjectDir)
	}
	m, err := kube.Render(o)
	if err != nil {
		return exitWith(config.ExitConfig, err)
	}
	b, err := m.YAML(c.Bool("template"))
	if err != nil {
		return err
	}
	if out := c.String("output"); out != "" {
		// The Secret is in it: the user's alone, never through a link.
		if err := safefile.Write(out, b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		return os.Chmod(out, 0o600)
	}
	_, err = c.App.Writer.Write(b)
	return err
}
