// Command manager is Sluice's one binary. Subcommands:
//
//	manager controller             reconcile RateLimitPolicies into Redis (leader-elected with --leader-elect)
//	manager check                  the check endpoint, reading the policy table from Redis
//	manager all                    both in one process
//	manager local --policies DIR   policies from YAML files, no cluster
//	manager version                versions of the binary and the Redis library
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

const usage = `usage: manager <command> [flags]

commands:
  controller reconcile RateLimitPolicies into the Redis policy table (leader-elected with --leader-elect)
  check      serve the check endpoint from the Redis policy table (no Kubernetes access)
  all        controller and check endpoint in one process
  local      serve the check endpoint for RateLimitPolicy YAML files in a folder (no cluster)
  convert    convert other rate limiters' configuration to RateLimitPolicy YAML (convert envoy-ratelimit FILE..., convert ingress-nginx FILE...|-)
  version    print the version of the binary and of its Redis library

Run 'manager <command> -h' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "controller":
		err = runController(args)
	case "check":
		err = runCheck(args)
	case "all":
		err = runAll(args)
	case "local":
		err = runLocal(args)
	case "convert":
		err = runConvert(args)
	case "version":
		runVersion()
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "manager: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
