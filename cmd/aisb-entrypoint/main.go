// Command aisb-entrypoint is the first process of every aisb sandbox: it locks
// the network namespace, drops every privilege and execs the command. As
// `aisb-entrypoint connect HOST PORT` it is the sandbox's ssh ProxyCommand; as
// `aisb-entrypoint relay`, started by itself, a transparent sandbox's relay.
package main

import (
	"os"

	"github.com/aisb-dev/aisb/entrypoint"
	"github.com/aisb-dev/aisb/entrypoint/tunnel"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "connect" {
		os.Exit(tunnel.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) == 2 && os.Args[1] == "relay" {
		os.Exit(entrypoint.RelayMain(os.Stderr))
	}
	os.Exit(entrypoint.New().Main(os.Args[1:]))
}
