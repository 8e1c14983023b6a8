// Command aisb-entrypoint is the first process of every aisb sandbox: it locks
// the network namespace, drops every privilege and execs the command. As
// `aisb-entrypoint connect HOST PORT` it is the sandbox's ssh ProxyCommand; as
// `table` and `pod` the init and agent containers of a Kubernetes pod (aisb kube).
// `aisb-entrypoint relay`, started by itself, a transparent sandbox's relay.
package main

import (
	"os"

	"github.com/aisb-dev/aisb/entrypoint"
	"github.com/aisb-dev/aisb/entrypoint/tunnel"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "connect":
			os.Exit(tunnel.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		case "table": // a pod's init container (aisb kube)
			os.Exit(entrypoint.NewPod().TableMain(os.Args[2:]))
		case "pod": // a pod's agent container (aisb kube)
			os.Exit(entrypoint.NewPod().PodMain(os.Args[2:]))
		}
	}
	if len(os.Args) == 2 && os.Args[1] == "relay" {
		os.Exit(entrypoint.RelayMain(os.Stderr))
	}
	os.Exit(entrypoint.New().Main(os.Args[1:]))
}
