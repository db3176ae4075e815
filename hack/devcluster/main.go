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

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", filepath.Join(os.TempDir(), "sluice-devcluster.kubeconfig"), "where to write the kubeconfig")
	crds := flag.String("crds", filepath.Join("config", "crd", "bases"), "directory of CRD manifests to install")
	flag.Parse()

	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		log.Fatal("KUBEBUILDER_ASSETS is not set; run `make envtest` and set it to bin/k8s/<version>")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{*crds}, ErrorIfCRDPathMissing: true}
	if _, err := env.Start(); err != nil {
		log.Fatalf("start envtest: %v", err)
	}
	user, err := env.AddUser(envtest.User{Name: "dev-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		log.Fatalf("add user: %v", err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		log.Fatalf("kubeconfig: %v", err)
	}
	if err := os.WriteFile(*kubeconfig, raw, 0o600); err != nil {
		_ = env.Stop()
		log.Fatalf("write kubeconfig: %v", err)
	}
	fmt.Printf("API server ready; export KUBECONFIG=%s\n", *kubeconfig)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	if err := env.Stop(); err != nil {
		log.Fatalf("stop envtest: %v", err)
	}
}
