// Command aisb-entrypoint is the first process of every aisb sandbox: it locks
// the network namespace, drops every privilege and execs the command.
package main

import (
	"os"

	"github.com/aisb-dev/aisb/entrypoint"
)

func main() {
	os.Exit(entrypoint.New().Main(os.Args[1:]))
}
