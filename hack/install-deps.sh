#!/usr/bin/env bash
# Installs the Debian packages the tests start as real servers, when missing.
# Usage: hack/install-deps.sh [command=package ...]
# Each argument names a command the tests run and the package that has it;
# without arguments the default set is installed.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  set -- redis-server=redis-server redis-cli=redis-tools redis-sentinel=redis-sentinel nginx=nginx caddy=caddy chromium=chromium
fi

missing=()
for pair in "$@"; do
  cmd="${pair%%=*}"
  pkg="${pair#*=}"
  command -v "${cmd}" >/dev/null 2>&1 || missing+=("${pkg}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

# Packages are named here, once, so the message below is exact.
echo "install-deps: installing ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: apt-get not found; install these packages by hand: ${missing[*]}" >&2
  exit 1
fi
SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "install-deps: not root and no password-less sudo; run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Debian starts packaged servers (redis, nginx, containerd) as system services
# on install; the tests run private instances of their own. A policy-rc.d that
# refuses every start keeps the services down while apt-get runs.
POLICY_RC=/usr/sbin/policy-rc.d
if [[ ! -e "${POLICY_RC}" ]]; then
  printf '#!/bin/sh\nexit 101\n' | ${SUDO} tee "${POLICY_RC}" >/dev/null
  ${SUDO} chmod +x "${POLICY_RC}"
  trap '${SUDO} rm -f "${POLICY_RC}"' EXIT
fi
${SUDO} apt-get update -qq >&2
${SUDO} apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
# Where a service manager started one anyway (a policy-rc.d of the machine's
# own), stop it: the tests' instances take their ports.
for svc in redis-server redis-sentinel nginx caddy containerd; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "${svc}" 2>/dev/null; then
    ${SUDO} systemctl stop "${svc}" >/dev/null 2>&1 || true
  fi
done
