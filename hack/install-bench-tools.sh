#!/usr/bin/env bash
# Installs the Go programs the RLS benchmark (hack/bench -only rls) runs into
# bin/, at pinned versions, when missing or at another version:
#   ghz           gRPC load generator
#   service_cmd   envoyproxy/ratelimit, the peer service
#   client_cmd    envoyproxy/ratelimit's one-request client
#   grpcurl       one-request gRPC client (with `bin/bench protoset -o FILE`)
# They build from the Go module proxy with `go install pkg@version` outside
# this module, so none of them enters go.mod.
# Usage: hack/install-bench-tools.sh [bin-dir]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$(mkdir -p "${1:-${here}/../bin}" && cd "${1:-${here}/../bin}" && pwd)"
GO="${GO:-go}"

# binary  module  version  package: one line each. envoyproxy/ratelimit tags
# no releases as Go modules; this is the newest pseudo-version the proxy
# serves (2026-01-22).
ratelimit_version=v1.4.1-0.20260122083618-3fb702589d36
tools=(
  "ghz github.com/bojand/ghz v0.120.0 github.com/bojand/ghz/cmd/ghz"
  "service_cmd github.com/envoyproxy/ratelimit ${ratelimit_version} github.com/envoyproxy/ratelimit/src/service_cmd"
  "client_cmd github.com/envoyproxy/ratelimit ${ratelimit_version} github.com/envoyproxy/ratelimit/src/client_cmd"
  "grpcurl github.com/fullstorydev/grpcurl v1.9.4 github.com/fullstorydev/grpcurl/cmd/grpcurl"
)

# installed BINARY MODULE VERSION: the binary was built from that module at
# that version (go version -m reads the build info every Go binary carries).
installed() {
  [[ -x "${bin}/$1" ]] && "${GO}" version -m "${bin}/$1" 2>/dev/null |
    awk -v m="$2" -v v="$3" '$1 == "mod" && $2 == m && $3 == v { found = 1 } END { exit !found }'
}

tmp=""
trap '[[ -n "${tmp}" ]] && rm -rf "${tmp}"' EXIT
for t in "${tools[@]}"; do
  read -r name module version pkg <<<"${t}"
  installed "${name}" "${module}" "${version}" && continue
  echo "install-bench-tools: installing ${name} (${pkg}@${version})" >&2
  # Outside any module and workspace: the tool's own go.mod decides its
  # dependencies. A staging GOBIN, so a failed build leaves no half binary.
  [[ -z "${tmp}" ]] && tmp="$(mktemp -d)"
  (cd "${tmp}" && GOWORK=off GOFLAGS=-mod=mod GOBIN="${tmp}/bin" "${GO}" install "${pkg}@${version}")
  mv "${tmp}/bin/${name}" "${bin}/${name}"
  installed "${name}" "${module}" "${version}" || {
    echo "install-bench-tools: ${bin}/${name} does not report ${module} ${version}" >&2
    exit 1
  }
done
