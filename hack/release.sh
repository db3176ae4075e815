#!/usr/bin/env bash
# Cuts a release (`make release VERSION=vX.Y.Z`): from a clean work tree
# whose CHANGELOG.md has a section for X.Y.Z,
# builds the image into the OCI layout IMAGE_LAYOUT, writes
# dist/install.yaml (the image pinned by digest) and
# dist/sluice-X.Y.Z.tgz (the chart, pinned to the same digest), the kubectl
# plugin's archives and krew manifest (hack/package-plugin.sh) with
# dist/SHA256SUMS, then tags HEAD with an annotated tag VERSION. The tag
# comes last, so a failed build leaves no tag behind.
#
# Nothing leaves the machine: the steps that publish are printed at the end
# (push the image, push the tag, attach dist/ to the release).
#
# Environment (make release sets them): VERSION (required), IMG (the image
# repository:tag the installer names), MAKE, IMAGE_LAYOUT, HELM, KUBECTL,
# CRANE, DIST (default dist), GO (default go).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${VERSION:?VERSION is required: make release VERSION=vX.Y.Z}"
: "${IMG:?IMG is required}" "${HELM:?}" "${KUBECTL:?}" "${CRANE:?}" "${IMAGE_LAYOUT:?}"
MAKE=${MAKE:-make}
DIST=${DIST:-dist}

fail() { echo "release: $*" >&2; exit 1; }

[[ $VERSION =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  fail "VERSION $VERSION: want vMAJOR.MINOR.PATCH[-PRERELEASE] (a tag such as v0.1.0)"
[[ -z $(git status --porcelain) ]] ||
  fail "the work tree has changes; a release is built from a commit:"$'\n'"$(git status --short)"
! git rev-parse -q --verify "refs/tags/$VERSION" >/dev/null ||
  fail "tag $VERSION exists already"
# The changelog's section for this version, written and committed first
# (Keep a Changelog: the Unreleased entries move under it); the tag's message.
notes=$(awk -v v="${VERSION#v}" '
  /^## \[/ { inside = index($0, "## [" v "]") == 1; if (inside) { print; next } }
  inside' CHANGELOG.md)
[[ -n $notes ]] ||
  fail "CHANGELOG.md has no '## [${VERSION#v}] - YYYY-MM-DD' section: move the Unreleased entries under it and commit"
revision=$(git rev-parse HEAD)
repo=${IMG%@*}
case ${repo##*/} in *:*) repo=${repo%:*} ;; esac

echo "release: $VERSION at $revision" >&2
"$MAKE" --no-print-directory image VERSION="$VERSION" REVISION="$revision" IMAGE_LAYOUT="$IMAGE_LAYOUT"
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][-1]["digest"])' "$IMAGE_LAYOUT/index.json")

mkdir -p "$DIST"
rm -f "$DIST"/install.yaml "$DIST"/sluice-*.tgz "$DIST"/SHA256SUMS
IMG="$repo@$digest" KUBECTL="$KUBECTL" OUT="$DIST/install.yaml" hack/build-installer.sh
HELM="$HELM" VERSION="$VERSION" DIGEST="$digest" OUT="$DIST" hack/package-chart.sh
VERSION="$VERSION" REVISION="$revision" OUT="$DIST" GO="${GO:-go}" hack/package-plugin.sh
(cd "$DIST" && sha256sum -- * >SHA256SUMS)

printf 'Sluice %s\n\n%s\n' "$VERSION" "$notes" | git tag -a --cleanup=verbatim "$VERSION" -F - "$revision"

cat >&2 <<EOF
release: $VERSION tagged at $revision
  image      $repo:$VERSION = $repo@$digest ($IMAGE_LAYOUT)
  installer  $DIST/install.yaml
  chart      $DIST/sluice-${VERSION#v}.tgz
  plugin     $DIST/kubectl-sluice_${VERSION}_*.tar.gz, krew manifest $DIST/sluice.yaml
To publish:
  make image-push IMG=$repo:$VERSION IMAGE_LAYOUT=$IMAGE_LAYOUT   # the digest above
  git push origin $VERSION
  attach $DIST/install.yaml, $DIST/sluice-${VERSION#v}.tgz, $DIST/kubectl-sluice_*.tar.gz, $DIST/sluice.yaml
    and $DIST/SHA256SUMS to the release $VERSION
EOF
