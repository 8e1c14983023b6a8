package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/aisb-dev/aisb/internal/engine"
)

// DetectHelper picks the rootless network helper the service can use:
// pasta where it exists and the service is new enough, else slirp4netns.
// It asks the service (`podman info`).
func DetectHelper(c engine.Engine, want string) (string, error) {
	info, err := c.Info(context.TODO())
	if err != nil {
		return "", fmt.Errorf("podman info: %w", err)
	}
	hasPasta := info.Host.Pasta.Executable != "" && c.RequirePasta() == nil
	hasSlirp := info.Host.Slirp4NetNS.Executable != ""
	switch want {
	case Pasta:
		if !hasPasta {
			if err := c.RequirePasta(); err != nil {
				return "", err
			}
			return "", errors.New("pasta is not installed where podman runs; install passt or use --network-helper slirp4netns")
		}
		return want, nil
	case Slirp4netns:
		if !hasSlirp {
			return "", errors.New("slirp4netns is not installed where podman runs")
		}
		return want, nil
	case "":
		if hasPasta {
			return Pasta, nil
		}
		if hasSlirp {
			return Slirp4netns, nil
		}
		return "", errors.New("neither pasta nor slirp4netns is installed where podman runs; install passt")
	default:
		return "", fmt.Errorf("network helper %q: want pasta or slirp4netns", want)
	}
}

// helperDirs are where Podman looks for its helper binaries (besides PATH).
var helperDirs = []string{"/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/libexec/podman", "/usr/lib/podman"}

// Helper is DetectHelper without `podman info` (a third of a second): the
// service runs on this host (the gate must share its loopback), so where
// pasta is installed here and the service is new enough, pasta it is. Any
// other case asks the service.
func Helper(c engine.Engine, want string) (string, error) {
	if want == "" && c.RequirePasta() == nil {
		if _, err := exec.LookPath("pasta"); err == nil {
			return Pasta, nil
		}
		for _, d := range helperDirs {
			if _, err := os.Stat(filepath.Join(d, "pasta")); err == nil {
				return Pasta, nil
			}
		}
	}
	return DetectHelper(c, want)
}
