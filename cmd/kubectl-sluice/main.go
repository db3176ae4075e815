// Command kubectl-sluice is the kubectl plugin `kubectl sluice`: Sluice's
// day-two operations (explain, inspect, reset, top, bans, lift, override)
// through the API server, or on local mode's admin listener with --server.
// 'kubectl sluice --help' lists the commands and exit codes.
package main

import (
	"os"

	"github.com/sluice-dev/sluice/internal/sluicectl"
)

func main() {
	os.Exit(sluicectl.Main(os.Args[1:], os.Stdout, os.Stderr))
}
