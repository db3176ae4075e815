#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, etcd, kubectl) from the Go
# module proxy and caches them under bin/k8s/<version> (hack/build-k8s.sh):
# setup-envtest would download prebuilt archives from the internet, which
# these machines cannot reach. Prints the asset directory (for
# KUBEBUILDER_ASSETS) on stdout.
exec "$(dirname "${BASH_SOURCE[0]}")/build-k8s.sh" kube-apiserver etcd kubectl
