#!/usr/bin/env bash
# Tears down the node up.sh started (`make cluster-down`), also after a
# failed or killed run: processes by their pid files, then whatever they left
# on the machine (containers, mounts, cgroups, the bridge and its veths,
# iptables chains, the two sysctls, /run/netns). Safe to run twice.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The node on this machine may be another state folder's (make cluster-up
# beside a test run): it is not this one's to tear down.
if [[ -f "${OWNER_FILE}" && "$(cat "${OWNER_FILE}")" != "${K}" ]]; then
  echo "cluster-down: the node on this machine is $(cat "${OWNER_FILE}")'s, not ${K}'s: K=$(cat "${OWNER_FILE}") $0" >&2
  exit 1
fi

# stop NAME: TERM the process in K/NAME.pid, KILL it after 10 s.
stop() {
  local f="${K}/$1.pid" p
  [[ -f "${f}" ]] || return 0
  p="$(cat "${f}")"
  if kill -0 "${p}" 2>/dev/null; then
    kill "${p}"
    for _ in $(seq 50); do kill -0 "${p}" 2>/dev/null || break; sleep 0.2; done
    kill -9 "${p}" 2>/dev/null
  fi
  rm -f "${f}"
}

# 1. No new pods; then the kubelet stops every pod it runs, so the CNI
# plugin releases addresses and veths.
stop kcm; stop scheduler
if alive kubelet && alive apiserver; then
  "${KUBECTL}" delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1
  for _ in $(seq 60); do
    [[ "$(ctr_k8s task ls -q 2>/dev/null | wc -l)" -eq 0 ]] && break
    sleep 0.5
  done
fi
ts "pods stopped"
stop kubelet; stop kube-proxy

# 2. What is left in containerd: tasks killed, containers deleted (their
# network namespaces go with the sandboxes).
if alive containerd; then
  for id in $(ctr_k8s task ls -q 2>/dev/null); do ctr_k8s task kill -s KILL "${id}" 2>/dev/null; done
  sleep 0.5
  for id in $(ctr_k8s task ls -q 2>/dev/null); do ctr_k8s task delete -f "${id}" 2>/dev/null; done
  for id in $(ctr_k8s container ls -q 2>/dev/null); do ctr_k8s container delete "${id}" 2>/dev/null; done
fi
stop containerd; stop apiserver; stop etcd; stop redis
# Shims outlive containerd when it was killed: they run from our state root.
for p in $(pgrep -f "containerd-shim.*${RUN_DIR}" 2>/dev/null); do kill -9 "${p}" 2>/dev/null; done
ts "processes stopped"

# 3. Mounts under the node's roots (overlay root filesystems, shm, network
# namespaces, kubelet volumes), deepest first.
for m in $(awk -v a="^(${LIB_DIR}|${RUN_DIR}|/run/netns/cni-|/var/run/netns/cni-)" '$2 ~ a { print $2 }' /proc/self/mounts | sort -r); do
  umount -l "${m}" 2>/dev/null
done
rm -f /run/netns/cni-* 2>/dev/null

# 4. The cgroups the kubelet made (cgroup v1: one tree per controller).
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/unified/kubepods; do
  [[ -d "${d}" ]] && find "${d}" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# 5. Network: veths still on the bridge, the bridge (its routes go with it),
# and the kubelet's and kube-proxy's chains in every table, IPv4 and IPv6.
for v in $(ip -o link show master "${BRIDGE}" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
  ip link del "${v}" 2>/dev/null
done
ip link del "${BRIDGE}" 2>/dev/null
for ipt in iptables ip6tables; do
  for t in nat filter mangle; do
    "${ipt}" -t "${t}" -S 2>/dev/null | grep -E '^-A (PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) .*-j KUBE-' | sed 's/^-A /-D /' |
      while read -r rule; do eval "${ipt} -t ${t} ${rule}"; done
    for c in $("${ipt}" -t "${t}" -S 2>/dev/null | awk '/^-N KUBE-/ { print $2 }'); do "${ipt}" -t "${t}" -F "${c}"; done
    for c in $("${ipt}" -t "${t}" -S 2>/dev/null | awk '/^-N KUBE-/ { print $2 }'); do "${ipt}" -t "${t}" -X "${c}"; done
  done
done
conntrack -D -s "${POD_CIDR}" >/dev/null 2>&1
conntrack -D -d "${SERVICE_CIDR}" >/dev/null 2>&1

# 6. The sysctls and /run/netns as they were before up.sh.
if [[ -f "${K}/sysctl.saved" ]]; then
  sed 's/ //g' "${K}/sysctl.saved" | xargs sysctl -w >/dev/null
  rm -f "${K}/sysctl.saved"
fi
if [[ -f "${K}/netns.created" ]]; then
  umount /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null
  rm -f "${K}/netns.created"
fi

# 7. State: the roots and etcd's data; the PKI, configuration and logs stay
# in K for a look after a failure (the next up.sh reuses them).
rm -rf "${LIB_DIR}" "${RUN_DIR}" "${K}/etcd-data" "${K}"/*.pid
# containerd 1.6 keeps shim sockets and fifos under /run/containerd whatever
# its configuration says: remove those folders when empty.
for d in /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo /run/containerd/s /run/containerd; do
  rmdir "${d}" 2>/dev/null
done
ts "node down"
exit 0
