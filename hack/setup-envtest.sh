#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, etcd, kubectl) from the Go module
# proxy and caches them under bin/k8s/<version>. setup-envtest would download
# prebuilt archives from the internet, which these machines cannot reach.
# Prints the asset directory (for KUBEBUILDER_ASSETS) on stdout.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ASSETS="${ROOT}/bin/k8s/${K8S_VERSION}"

if [[ -x "${ASSETS}/kube-apiserver" && -x "${ASSETS}/etcd" && -x "${ASSETS}/kubectl" ]]; then
  echo "${ASSETS}"
  exit 0
fi

log() { echo "setup-envtest: $*" >&2; }
log "building kube-apiserver, etcd and kubectl v${K8S_VERSION} from source (about 6 minutes on 2 cores, once)"

WORK="${ROOT}/bin/.envtest-src"
rm -rf "${WORK}"
mkdir -p "${WORK}" "${ASSETS}"
cd "${WORK}"

# A throwaway module outside the project's: k8s.io/kubernetes replaces its
# staging modules with ./staging paths, so a consumer must pin each of them.
export GOFLAGS=-mod=mod
go mod init sluice.dev/envtest-assets >/dev/null 2>&1
KMOD="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
if [[ -z "${KMOD}" || ! -f "${KMOD}" ]]; then
  log "cannot download k8s.io/kubernetes@v${K8S_VERSION} through the Go module proxy ($(go env GOPROXY))"
  exit 1
fi
STAGING_VERSION="v0.${K8S_VERSION#1.}"
go mod edit -require="k8s.io/kubernetes@v${K8S_VERSION}"
grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "${KMOD}" | awk '{print $1}' | sort -u | while read -r mod; do
  go mod edit -replace="${mod}=${mod}@${STAGING_VERSION}"
done

cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
# tidy resolves etcd and the rest at the versions k8s.io/kubernetes selects.
go mod tidy >&2

LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION}"
go build -trimpath -ldflags "${LDFLAGS}" -o "${ASSETS}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
go build -trimpath -ldflags "${LDFLAGS}" -o "${ASSETS}/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
go build -trimpath -ldflags "-s -w" -o "${ASSETS}/etcd" go.etcd.io/etcd/server/v3 >&2

cd "${ROOT}"
rm -rf "${WORK}"
log "done: ${ASSETS}"
echo "${ASSETS}"
