#!/usr/bin/env bash
# Writes one installer manifest (kubebuilder's dist/install.yaml): everything
# config/default installs, with the image that config/manager names
# (ghcr.io/sluice-dev/sluice:latest) replaced by IMG, pinned by digest, and
# without the two Redis Secrets (sluice-redis-check, sluice-redis-controller):
# their placeholders would overwrite a user's credentials each time a new
# release's installer is applied. The user creates them once (docs/getting-started/cluster.md,
# the install step); the pods start when they exist.
#
#   IMG=registry.example/sluice@sha256:<digest> hack/build-installer.sh
#   IMG=registry.example/sluice:v0.1.0 hack/build-installer.sh   # digest from LAYOUT
#
# IMG with a digest is used as it is. IMG without one is pinned to the digest
# of the image in the OCI layout LAYOUT (what `make image` wrote); without a
# layout the tag is kept and a warning says the installer is not pinned.
#
# Environment: IMG (required), KUBECTL (default bin/k8s/<K8S_VERSION>/kubectl),
# OUT (default dist/install.yaml), LAYOUT (default bin/image).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${IMG:?IMG is required: IMG=<repo>@sha256:<digest> or IMG=<repo>:<tag>}"
KUBECTL=${KUBECTL:-bin/k8s/${K8S_VERSION:-1.37.2}/kubectl}
OUT=${OUT:-dist/install.yaml}
LAYOUT=${LAYOUT:-bin/image}
# The image as config/manager/kustomization.yaml names it, without its tag.
base_image=ghcr.io/sluice-dev/sluice

if [[ ! -x $KUBECTL ]]; then
  echo "build-installer: $KUBECTL not found; run 'make envtest' or set KUBECTL" >&2
  exit 1
fi

repo=$IMG digest='' tag=''
if [[ $IMG == *@* ]]; then
  repo=${IMG%%@*} digest=${IMG#*@}
  if [[ ! $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "build-installer: IMG $IMG: the digest must be sha256:<64 hex digits>" >&2
    exit 1
  fi
else
  last=${IMG##*/}
  if [[ $last == *:* ]]; then
    repo=${IMG%:*} tag=${last##*:}
  fi
  if [[ -f $LAYOUT/index.json ]]; then
    # ko writes the multi-platform index as the layout's one manifest.
    digest=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["manifests"]; print(m[-1]["digest"])' "$LAYOUT/index.json")
    echo "build-installer: pinning $IMG to $digest, the image in $LAYOUT" >&2
  else
    echo "build-installer: warning: $IMG has no digest and $LAYOUT holds no image: the installer is not pinned" >&2
  fi
fi

overlay=$(mktemp -d "$root/bin/.installer.XXXXXX")
trap 'rm -rf "$overlay"' EXIT
{
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "resources:"
  echo "- ../../config/default"
  echo "images:"
  echo "- name: $base_image"
  echo "  newName: $repo"
  if [[ -n $digest ]]; then
    echo "  digest: $digest"
  elif [[ -n $tag ]]; then
    echo "  newTag: $tag"
  fi
  echo "patches:"
  for secret in sluice-redis-check sluice-redis-controller; do
    echo "- patch: |-"
    echo "    \$patch: delete"
    echo "    apiVersion: v1"
    echo "    kind: Secret"
    echo "    metadata:"
    echo "      name: $secret"
    echo "      namespace: sluice-system"
  done
} >"$overlay/kustomization.yaml"

mkdir -p "$(dirname "$OUT")"
"$KUBECTL" kustomize "$overlay" >"$OUT.tmp"
if grep -q "image: $base_image:latest" "$OUT.tmp"; then
  echo "build-installer: $OUT still names $base_image:latest" >&2
  rm -f "$OUT.tmp"
  exit 1
fi
if grep -q '^kind: Secret$' "$OUT.tmp"; then
  echo "build-installer: $OUT still holds a Secret" >&2
  rm -f "$OUT.tmp"
  exit 1
fi
mv "$OUT.tmp" "$OUT"
echo "build-installer: wrote $OUT with image $(grep -m1 -o 'image: .*' "$OUT" | cut -d' ' -f2)" >&2
