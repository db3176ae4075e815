#!/usr/bin/env bash
# Installs the docs site's generator, mkdocs-material from PyPI, pinned, into
# a virtual environment of its own under bin/ (never system-wide), when
# missing, and prints the path of its mkdocs.
# Usage: hack/install-docs.sh BIN_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${1:?usage: hack/install-docs.sh BIN_DIR}"

# Pinned: the site is built and tested with these versions; a new pin is a
# new folder, so an older environment never serves a newer pin.
packages=(mkdocs==1.6.1 mkdocs-material==9.8.1 pymdown-extensions==13.1)
venv="${bin}/docs-venv-mkdocs-material-9.8.1"

if [[ -x "${venv}/bin/mkdocs" ]] && "${venv}/bin/python" - "${packages[@]}" <<'PY' 2>/dev/null
import sys
from importlib import metadata
sys.exit(0 if all(metadata.version(n) == v for n, v in (p.split("==") for p in sys.argv[1:])) else 1)
PY
then
  echo "${venv}/bin/mkdocs"
  exit 0
fi

python=$(command -v python3 || true)
if [[ -z "${python}" ]]; then
  "${here}/install-deps.sh" python3=python3
  python=$(command -v python3)
fi
# Debian's python3 keeps venv (and the pip it seeds) in a package of its own.
if ! "${python}" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  "${here}/install-deps.sh" "$(basename "${python}")-venv=python3-venv"
fi
echo "install-docs: installing ${packages[*]} from PyPI into ${venv}" >&2
rm -rf "${venv}"
"${python}" -m venv "${venv}"
"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${packages[@]}" >&2
echo "${venv}/bin/mkdocs"
