#!/usr/bin/env bash
# import-image.sh LAYOUT REF: imports the image of the OCI layout LAYOUT
# (what `make image` writes) into the node's containerd as REF
# (repository@sha256:... or repository:tag), so pods that name REF start
# without a registry.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LAYOUT="$1" REF="$2"
tarball="$(mktemp "${K}/image.XXXXXX.tar")"
trap 'rm -f "${tarball}"' EXIT
tar -C "${LAYOUT}" -cf "${tarball}" .
name="${REF%@*}"; name="${name%:*}:import-$$"
ctr_k8s image import --index-name "${name}" "${tarball}" >/dev/null
ctr_k8s image tag --force "${name}" "${REF}" >/dev/null
ctr_k8s image rm "${name}" >/dev/null
