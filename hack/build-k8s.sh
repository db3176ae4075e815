#!/usr/bin/env bash
# Builds Kubernetes binaries from the Go module proxy (the internet's release
# archives are out of reach here) and caches them under bin/k8s/<version>.
# Usage: hack/build-k8s.sh NAME...   where NAME is etcd or a k8s.io/kubernetes
# command (kube-apiserver, kubectl, kubelet, kube-proxy, ...). Names already
# built are skipped. Prints the asset directory on stdout.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ASSETS="${ROOT}/bin/k8s/${K8S_VERSION}"

missing=()
for name in "$@"; do
  [[ -x "${ASSETS}/${name}" ]] || missing+=("${name}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "${ASSETS}"
  exit 0
fi

log() { echo "build-k8s: $*" >&2; }
log "building ${missing[*]} v${K8S_VERSION} from source, once (minutes on 2 cores)"

WORK="${ROOT}/bin/.k8s-src-$$"
rm -rf "${WORK}"
mkdir -p "${WORK}" "${ASSETS}"
trap 'rm -rf "${WORK}"' EXIT
cd "${WORK}"

# A throwaway module outside the project's: k8s.io/kubernetes replaces its
# staging modules with ./staging paths, so a consumer must pin each of them.
export GOFLAGS=-mod=mod
go mod init sluice.dev/k8s-assets >/dev/null 2>&1
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

{
  echo '//go:build tools'
  echo
  echo 'package tools'
  echo
  echo 'import ('
  for name in "${missing[@]}"; do
    if [[ "${name}" == etcd ]]; then
      echo '	_ "go.etcd.io/etcd/server/v3"'
    else
      echo "	_ \"k8s.io/kubernetes/cmd/${name}\""
    fi
  done
  echo ')'
} > tools.go
# tidy resolves etcd and the rest at the versions k8s.io/kubernetes selects.
go mod tidy >&2

LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION}"
for name in "${missing[@]}"; do
  if [[ "${name}" == etcd ]]; then
    go build -trimpath -ldflags "-s -w" -o "${ASSETS}/etcd" go.etcd.io/etcd/server/v3 >&2
  else
    go build -trimpath -ldflags "${LDFLAGS}" -o "${ASSETS}/${name}" "k8s.io/kubernetes/cmd/${name}" >&2
  fi
  log "built ${name}"
done
echo "${ASSETS}"
