#!/usr/bin/env bash
# Writes the manager image's base layer, a tar archive of what the static
# binary needs from an operating system and nothing more (no shell, no
# package manager, no libc): the parts of distroless/static that Sluice uses,
# built here so that `make image` needs no registry but the Go module proxy.
#
#   etc/passwd, etc/group     root, nobody, and nonroot (65532:65532), the
#                             user the image runs as
#   etc/nsswitch.conf         hosts: files dns (Go's resolver reads it)
#   etc/ssl/certs/ca-certificates.crt
#                             Mozilla's CA certificates from Debian's
#                             ca-certificates package (its
#                             /usr/share/ca-certificates/mozilla, never the
#                             host's /etc/ssl/certs, so a builder's own CAs
#                             are not shipped), for rediss:// with a public CA
#   usr/share/doc/ca-certificates/copyright   their licence
#   tmp                       1777, as in every base image
#
# No time zone data: Sluice reads no time zone (clock-aligned windows are
# aligned to UTC). Everything is owned by root; the same inputs give the same
# bytes (names sorted, numeric owners, modification times SOURCE_DATE_EPOCH,
# 0 by default).
#
# Usage: hack/image-rootfs.sh OUT.tar
# The Dockerfile runs it too, so both builds ship the same files.
set -euo pipefail

out=${1:?usage: image-rootfs.sh OUT.tar}
epoch=${SOURCE_DATE_EPOCH:-0}
certs=/usr/share/ca-certificates/mozilla
licence=/usr/share/doc/ca-certificates/copyright
if ! compgen -G "$certs/*.crt" >/dev/null || [[ ! -f $licence ]]; then
  echo "image-rootfs: $certs/*.crt not found: install Debian's ca-certificates package (apt-get install ca-certificates)" >&2
  exit 1
fi

umask 022
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/etc/ssl/certs" "$stage/tmp" "$stage/usr/share/doc/ca-certificates"
chmod 1777 "$stage/tmp"

cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin
EOF
cat >"$stage/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
echo 'hosts: files dns' >"$stage/etc/nsswitch.conf"
# One PEM bundle, in name order (what update-ca-certificates would write
# with every Mozilla certificate selected).
LC_ALL=C
for f in "$certs"/*.crt; do
  cat "$f"
  # Some files lack a final newline; PEM blocks must start on a line.
  [[ -z $(tail -c1 "$f") ]] || echo
done >"$stage/etc/ssl/certs/ca-certificates.crt"
cp "$licence" "$stage/usr/share/doc/ca-certificates/copyright"
chmod 0644 "$stage/etc/passwd" "$stage/etc/group" "$stage/etc/nsswitch.conf" \
  "$stage/etc/ssl/certs/ca-certificates.crt" "$stage/usr/share/doc/ca-certificates/copyright"

mkdir -p "$(dirname "$out")"
tar --create --file="$out" --format=gnu --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime="@$epoch" -C "$stage" etc tmp usr
