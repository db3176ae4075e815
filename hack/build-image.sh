#!/usr/bin/env bash
# Builds the manager image without a Docker daemon and without any registry
# but the Go module proxy (`make image`): for each platform a static binary
# (the Dockerfile's build flags), on the base layer of hack/image-rootfs.sh,
# assembled with crane (go-containerregistry) through a registry it serves
# on loopback for the length of the build, and written as an OCI image
# layout whose one entry is the multi-platform index.
#
#   /manager            the binary, the entrypoint
#   user 65532:65532    nonroot; no shell, no package manager
#   labels              org.opencontainers.image.{source,version,revision,title}
#
# The same sources, VERSION, REVISION and ca-certificates package give the
# same digest: layers have fixed owners and times, the configs no creation
# time, and nothing names the loopback registry.
#
# Environment: CRANE (required: the crane binary), OUT (default bin/image),
# PLATFORMS (default linux/amd64,linux/arm64), VERSION, REVISION (default
# unknown), GO (default go).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${CRANE:?CRANE is required: the crane binary (make image builds it into bin/)}"
OUT=${OUT:-bin/image}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
VERSION=${VERSION:-unknown}
REVISION=${REVISION:-unknown}
GO=${GO:-go}
buildinfo=github.com/sluice-dev/sluice/internal/buildinfo

mkdir -p bin
work=$(mktemp -d "$root/bin/.image.XXXXXX")
registry_pid=''
cleanup() {
  if [[ -n $registry_pid ]]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

hack/image-rootfs.sh "$work/rootfs.tar"

IFS=, read -r -a platforms <<<"$PLATFORMS"
for p in "${platforms[@]}"; do
  os=${p%%/*} arch=${p#*/}
  if [[ $os != linux || -z $arch || $arch == */* ]]; then
    echo "build-image: platform $p: want linux/<arch>" >&2
    exit 1
  fi
  mkdir -p "$work/$arch"
  echo "build-image: go build for $p" >&2
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $buildinfo.Version=$VERSION -X $buildinfo.Revision=$REVISION" \
    -o "$work/$arch/manager" ./cmd/manager
  chmod 0755 "$work/$arch/manager"
  tar --create --file="$work/$arch.tar" --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime=@0 -C "$work/$arch" manager
done

# A registry on loopback for crane's mutations (they read and write a
# registry); in memory, gone when the build ends.
"$CRANE" registry serve --address 127.0.0.1:0 2>"$work/registry.log" &
registry_pid=$!
port=''
for _ in $(seq 100); do
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/registry.log")
  [[ -n $port ]] && break
  if ! kill -0 "$registry_pid" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
if [[ -z $port ]]; then
  echo "build-image: crane registry serve did not start:" >&2
  cat "$work/registry.log" >&2
  exit 1
fi
repo=127.0.0.1:$port/sluice
# crane logs every blob; its log is shown when a step fails.
crane() {
  "$CRANE" "$@" 2>>"$work/crane.log" || {
    echo "build-image: crane $1 failed:" >&2
    cat "$work/crane.log" >&2
    return 1
  }
}

manifests=()
for p in "${platforms[@]}"; do
  arch=${p#*/}
  crane append --oci-empty-base -f "$work/rootfs.tar" -f "$work/$arch.tar" -t "$repo:$arch" >/dev/null
  crane mutate "$repo:$arch" -t "$repo:$arch" --set-platform "$p" \
    --entrypoint /manager --user 65532:65532 --workdir / \
    -e PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    -l org.opencontainers.image.source=https://github.com/sluice-dev/sluice \
    -l org.opencontainers.image.title=sluice \
    -l "org.opencontainers.image.version=$VERSION" \
    -l "org.opencontainers.image.revision=$REVISION" >/dev/null
  manifests+=(-m "$repo:$arch")
done
crane index append "${manifests[@]}" -t "$repo:index" >/dev/null

rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
crane pull --format=oci "$repo:index" "$OUT"
digest=$(crane digest "$repo:index")
echo "build-image: $OUT holds $digest ($PLATFORMS, version $VERSION)" >&2
