// Command aisb runs an AI coding agent in a rootless Podman sandbox that can
// reach only an explicit allowlist, through a per-session egress gate.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
