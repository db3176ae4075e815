// Command pause is the node's sandbox image: the process that holds a pod's
// namespaces. It sleeps until SIGTERM or SIGINT and reaps orphaned children.
// Nothing can be pulled from a registry on the test machines, so the node
// builds its own instead of registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
