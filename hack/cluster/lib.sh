# Shared by up.sh, deploy.sh and down.sh: where the node lives and what it
# binds. Sourced, not run.
#
# One node per machine: it takes fixed addresses (the bridge knode0 with
# 10.88.0.1/16, the Service range 10.96.0.0/12, ports on 10.88.0.1 only, so
# nothing collides with the tests' loopback ports) and machine-wide state
# (iptables chains, sysctls, mounts, cgroups). /run/sluice-node/owner names
# the state folder of the node that is up; down.sh reads it.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
# The node's state: PKI, kubeconfigs, configuration, logs, pid files.
K="${K:-${ROOT}/bin/cluster}"
ASSETS="${ASSETS:-${ROOT}/bin/k8s/${K8S_VERSION}}"
NODE_NAME=knode
BRIDGE=knode0
NODE_IP=10.88.0.1
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.96.0.0/12
KUBERNETES_SERVICE_IP=10.96.0.1
APISERVER_PORT=6443
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800
REDIS_PORT=16379
# containerd's and the kubelet's roots: outside K because their overlay
# mounts and sockets must not sit under a folder a checkout may delete.
RUN_DIR=/run/sluice-node
LIB_DIR=/var/lib/sluice-node
CONTAINERD_SOCK="${RUN_DIR}/containerd.sock"
OWNER_FILE="${RUN_DIR}/owner"
KUBECTL="${ASSETS}/kubectl"
export KUBECONFIG="${K}/kubeconfig"

ctr_k8s() { ctr -a "${CONTAINERD_SOCK}" -n k8s.io "$@"; }

t0=$(date +%s%N)
# ts MESSAGE: the message on stderr with the seconds since the script began.
ts() { awk -v a="${t0}" -v b="$(date +%s%N)" -v m="$*" 'BEGIN { printf "[%6.2fs] %s\n", (b - a) / 1e9, m }' >&2; }

# alive NAME: the process in K/NAME.pid runs.
alive() { [[ -f "${K}/$1.pid" ]] && kill -0 "$(cat "${K}/$1.pid")" 2>/dev/null; }
