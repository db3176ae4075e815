#!/usr/bin/env bash
# Installs Sluice on the node up.sh started (`make cluster-deploy`), the way
# a user installs a release: the image imported into containerd (nothing can
# be pulled here) under the reference the installer pins, the installer
# applied, the two Redis Secrets created for the node's Redis, and both
# Deployments waited for.
#
# Environment: LAYOUT (the OCI layout `make image` wrote, default bin/image),
# INSTALLER (default dist/install.yaml).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LAYOUT="${LAYOUT:-${ROOT}/bin/image}"
INSTALLER="${INSTALLER:-${ROOT}/dist/install.yaml}"

alive apiserver && alive kubelet || { echo "cluster-deploy: no node is up: run 'make cluster-up'" >&2; exit 1; }
[[ -f "${LAYOUT}/index.json" ]] || { echo "cluster-deploy: ${LAYOUT} holds no image: run 'make image'" >&2; exit 1; }
[[ -f "${INSTALLER}" ]] || { echo "cluster-deploy: ${INSTALLER} missing: run 'make build-installer'" >&2; exit 1; }

# The installer names the image by digest; containerd gets it under that name.
ref="$(sed -n 's/^ *image: *\([^ ]*@sha256:[0-9a-f]*\).*/\1/p' "${INSTALLER}" | sort -u)"
[[ "$(wc -l <<< "${ref}")" -eq 1 && -n "${ref}" ]] || { echo "cluster-deploy: ${INSTALLER} pins no single image by digest (found: ${ref:-none})" >&2; exit 1; }
"${ROOT}/hack/cluster/import-image.sh" "${LAYOUT}" "${ref}"
ts "image imported: ${ref}"

"${KUBECTL}" apply --server-side -f "${INSTALLER}" >/dev/null
password() { awk -F= -v u="$1" '$1 == u { print $2 }' "${K}/redis/passwords"; }
for component in check controller; do
  "${KUBECTL}" -n sluice-system create secret generic "sluice-redis-${component}" \
    --from-literal=url="redis://${NODE_IP}:${REDIS_PORT}/0" \
    --from-literal=username="sluice-${component}" --from-literal=password="$(password "sluice-${component}")" \
    --dry-run=client -o yaml | "${KUBECTL}" apply -f - >/dev/null
done
ts "installer applied, Redis Secrets created"
"${KUBECTL}" -n sluice-system rollout status deployment/sluice-controller --timeout=180s >/dev/null
"${KUBECTL}" -n sluice-system rollout status deployment/sluice-check --timeout=180s >/dev/null
ts "sluice-controller and sluice-check Ready"
for _ in $(seq 120); do
  holder="$("${KUBECTL}" -n sluice-system get lease sluice-controller.ratelimit.sluice.dev -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
  [[ -n "${holder}" ]] && break
  sleep 0.5
done
[[ -n "${holder}" ]] || { echo "cluster-deploy: no controller took the Lease within 60s" >&2; exit 1; }
ts "leader: ${holder}"
echo "check Service: $("${KUBECTL}" -n sluice-system get service sluice-check -o jsonpath='{.spec.clusterIP}'), ports 8080 (HTTP) and 9090 (gRPC)" >&2
