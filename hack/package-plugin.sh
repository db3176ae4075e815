#!/usr/bin/env bash
# Builds the kubectl plugin's release files into OUT (`make plugin-dist`,
# `make release`): for linux and darwin on amd64 and arm64, an archive
# kubectl-sluice_<version>_<os>_<arch>.tar.gz holding the static binary
# kubectl-sluice (and LICENSE when the tree has one), and the krew manifest
# sluice.yaml whose URIs name those archives at the release's download URL
# and whose sha256 are theirs. The archives are reproducible: files sorted,
# owned by 0:0, dated at the commit, gzip without a name or time.
#
#   VERSION=v0.2.0 hack/package-plugin.sh
#
# Environment: VERSION (required, vX.Y.Z[-pre]: krew's version), REVISION
# (default HEAD), OUT (default dist), GO (default go), DOWNLOAD_URL (where
# the release's files are published; default the GitHub release of VERSION).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${VERSION:?VERSION is required: vMAJOR.MINOR.PATCH[-PRERELEASE]}"
[[ $VERSION =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] || {
  echo "package-plugin: VERSION $VERSION: want vMAJOR.MINOR.PATCH[-PRERELEASE] (krew's version)" >&2
  exit 1
}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-dist}
GO=${GO:-go}
DOWNLOAD_URL=${DOWNLOAD_URL:-https://github.com/sluice-dev/sluice/releases/download/$VERSION}
buildinfo=github.com/sluice-dev/sluice/internal/buildinfo
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)

mkdir -p "$OUT"
rm -f "$OUT"/kubectl-sluice_*.tar.gz "$OUT"/sluice.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

platforms=""
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${platform%/*} arch=${platform#*/}
  archive=kubectl-sluice_${VERSION}_${os}_${arch}.tar.gz
  echo "package-plugin: $archive" >&2
  dir=$work/$os-$arch
  mkdir -p "$dir"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $buildinfo.Version=$VERSION -X $buildinfo.Revision=$REVISION" \
    -o "$dir/kubectl-sluice" ./cmd/kubectl-sluice
  files=(kubectl-sluice)
  if [[ -f LICENSE ]]; then
    cp LICENSE "$dir/LICENSE"
    files+=(LICENSE)
  fi
  tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "${files[@]}" |
    gzip -n -9 >"$OUT/$archive"
  sum=$(sha256sum "$OUT/$archive" | cut -d' ' -f1)
  platforms+="  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $DOWNLOAD_URL/$archive
    sha256: $sum
    bin: kubectl-sluice
"
done

cat >"$OUT/sluice.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: sluice
spec:
  version: $VERSION
  homepage: https://github.com/sluice-dev/sluice
  shortDescription: Explain, inspect, reset and override Sluice rate limits
  description: |
    Day-two operations on Sluice rate limits through the API server, with your
    kubeconfig's credentials: explain why a request is admitted or denied,
    inspect and reset a key, list top offenders and bans, lift a ban, and set,
    list and delete run-time overrides of a tenant's limits. Each call is
    authorized against the RateLimitPolicy it touches.
  caveats: |
    The plugin calls Sluice's admin API, the APIService
    v1alpha1.admin.ratelimit.sluice.dev that Sluice's controller serves:
    install Sluice $VERSION in the cluster first. 'kubectl sluice --help'
    lists the commands and their exit codes.
  platforms:
$platforms
YAML
echo "package-plugin: $OUT/sluice.yaml and 4 archives (version $VERSION)" >&2
