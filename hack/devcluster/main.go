// Command devcluster starts a local kube-apiserver and etcd (envtest) with
// the Sluice CRDs installed, writes a kubeconfig, and runs until interrupted.
// It gives `kubectl apply` a real API server on machines without a cluster:
//
//	KUBEBUILDER_ASSETS=bin/k8s/1.37.2 go run ./hack/devcluster -write-kubeconfig /tmp/sluice.kubeconfig
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sluice-dev/sluice/internal/testutil/envtest"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", filepath.Join(os.TempDir(), "sluice-devcluster.kubeconfig"), "where to write the kubeconfig")
	crds := flag.String("crds", filepath.Join("config", "crd", "bases"), "directory of CRD manifests to install")
	flag.Parse()

	env, err := envtest.Start(envtest.Options{
		CRDDirs: []string{*crds},
		Setup: []func(*envtest.Environment) error{func(e *envtest.Environment) error {
			return e.WriteKubeconfig(*kubeconfig, "dev-admin", "system:masters")
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("API server ready; export KUBECONFIG=%s\n", *kubeconfig)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	if err := env.Stop(); err != nil {
		log.Fatalf("stop envtest: %v", err)
	}
}
