#!/usr/bin/env bash
# Brings up a one-node Kubernetes cluster on this machine (`make cluster-up`):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
# with runc, a kubelet, kube-proxy (iptables mode) and the bridge CNI plugin,
# plus a Redis for the pods with the ACL users of config/redis/users.acl.
# Writes the admin kubeconfig to $K/kubeconfig (bin/cluster/kubeconfig).
#
# Every binary is the project's own build (hack/build-k8s.sh) or a Debian
# package (hack/install-deps.sh); nothing is pulled, so pods run images
# imported into containerd (the pause image is built here). Traffic stays
# on the machine: pods get routes to the pod and Service ranges only and no
# DNS server, the API server reaches the kubelet by address.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="${ROOT}/hack/cluster"

[[ "$(id -u)" -eq 0 ]] || { echo "cluster-up: needs root (bridges, iptables, mounts, cgroups)" >&2; exit 1; }
for b in etcd kube-apiserver kubectl kubelet kube-proxy kube-controller-manager kube-scheduler; do
  [[ -x "${ASSETS}/${b}" ]] || { echo "cluster-up: ${ASSETS}/${b} missing: run 'make cluster-node'" >&2; exit 1; }
done
for c in containerd runc ctr iptables conntrack openssl; do
  command -v "${c}" >/dev/null || { echo "cluster-up: ${c} missing: run 'make cluster-node'" >&2; exit 1; }
done

# One node per machine. A node that is up answers; one whose processes died
# (a killed run) is cleaned first.
if [[ -f "${OWNER_FILE}" ]]; then
  owner="$(cat "${OWNER_FILE}")"
  if [[ "${owner}" != "${K}" ]] && K="${owner}" bash -c 'source "$0"; alive kubelet || alive apiserver' "${HERE}/lib.sh"; then
    echo "cluster-up: a node from ${owner} is up on this machine; 'K=${owner} make cluster-down' first" >&2
    exit 1
  fi
  if [[ "${owner}" == "${K}" ]] && alive kubelet && alive apiserver; then
    ts "the node is already up (KUBECONFIG=${KUBECONFIG})"
    exit 0
  fi
  ts "cleaning a node left by an earlier run (${owner})"
  K="${owner}" "${HERE}/down.sh"
fi
mkdir -p "${K}/logs" "${RUN_DIR}" "${LIB_DIR}"
echo "${K}" > "${OWNER_FILE}"

# PKI and credentials, once per state folder: a CA, the API server's
# certificate (its Service IP and the node address as names), the
# service-account key pair, and a static token per component.
PKI="${K}/pki"
if [[ ! -f "${PKI}/tokens.csv" ]]; then
  mkdir -p "${PKI}"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice-node-ca" \
    -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "${PKI}/apiserver.key" -out "${PKI}/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:%s,IP:%s,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' \
    "${KUBERNETES_SERVICE_IP}" "${NODE_IP}" > "${PKI}/apiserver.ext"
  openssl x509 -req -in "${PKI}/apiserver.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -CAcreateserial \
    -days 30 -extfile "${PKI}/apiserver.ext" -out "${PKI}/apiserver.crt" 2>/dev/null
  openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
  token() { openssl rand -hex 16; }
  {
    echo "$(token),admin,admin,system:masters"
    echo "$(token),system:node:${NODE_NAME},node,system:nodes"
    echo "$(token),system:kube-controller-manager,kcm"
    echo "$(token),system:kube-scheduler,scheduler"
    echo "$(token),system:kube-proxy,kube-proxy"
  } > "${PKI}/tokens.csv.new"
  mv "${PKI}/tokens.csv.new" "${PKI}/tokens.csv"
  chmod 600 "${PKI}"/*.key "${PKI}/tokens.csv"
fi
# The front proxy's own CA and client certificate: the API server proxies
# aggregated APIs (Sluice's admin API) with it, as kubeadm sets it up.
if [[ ! -f "${PKI}/front-proxy-client.crt" ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice-node-front-proxy-ca" \
    -keyout "${PKI}/front-proxy-ca.key" -out "${PKI}/front-proxy-ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=front-proxy-client" \
    -keyout "${PKI}/front-proxy-client.key" -out "${PKI}/front-proxy-client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' > "${PKI}/front-proxy-client.ext"
  openssl x509 -req -in "${PKI}/front-proxy-client.csr" -CA "${PKI}/front-proxy-ca.crt" -CAkey "${PKI}/front-proxy-ca.key" \
    -CAcreateserial -days 30 -extfile "${PKI}/front-proxy-client.ext" -out "${PKI}/front-proxy-client.crt" 2>/dev/null
  chmod 600 "${PKI}"/*.key
fi
# kubeconfig NAME USER: a kubeconfig for USER's token from tokens.csv.
kubeconfig() {
  local tok; tok="$(awk -F, -v u="$2" '$2 == u { print $1 }' "${PKI}/tokens.csv")"
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: sluice-node
  cluster: {server: "https://${NODE_IP}:${APISERVER_PORT}", certificate-authority: "${PKI}/ca.crt"}
users:
- name: $2
  user: {token: "${tok}"}
contexts:
- name: sluice-node
  context: {cluster: sluice-node, user: "$2"}
current-context: sluice-node
KC
  chmod 600 "$1"
}
mkdir -p "${K}/etc"
kubeconfig "${K}/kubeconfig" admin
kubeconfig "${K}/etc/kubelet.kubeconfig" "system:node:${NODE_NAME}"
kubeconfig "${K}/etc/kcm.kubeconfig" system:kube-controller-manager
kubeconfig "${K}/etc/scheduler.kubeconfig" system:kube-scheduler
kubeconfig "${K}/etc/kube-proxy.kubeconfig" system:kube-proxy

# Configuration. containerd: its own roots and socket; runc may not lower
# oom_score_adj (these machines withhold CAP_SYS_RESOURCE), so containerd
# does not ask it to.
mkdir -p "${K}/cni/net.d" "${K}/redis"
cat > "${K}/etc/containerd.toml" <<CFG
version = 2
root = "${LIB_DIR}/containerd"
state = "${RUN_DIR}/containerd"
[grpc]
  address = "${CONTAINERD_SOCK}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${RUN_DIR}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${K}/cni/net.d"
CFG
# Pods: addresses from the bridge's range, routes to the pod and Service
# ranges only (no default route: nothing leaves the machine).
cat > "${K}/cni/net.d/10-sluice-node.conflist" <<CFG
{
  "cniVersion": "1.0.0",
  "name": "sluice-node",
  "plugins": [
    {
      "type": "bridge", "bridge": "${BRIDGE}", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${POD_CIDR}"}]],
        "routes": [{"dst": "${POD_CIDR}"}, {"dst": "${SERVICE_CIDR}", "gw": "${NODE_IP}"}],
        "dataDir": "${RUN_DIR}/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CFG
# The kubelet: cgroup v1 with the cgroupfs driver (no systemd here), no DNS
# server for pods (resolvConf empty), every port on the node address.
cat > "${K}/etc/kubelet.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
address: ${NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: ${NODE_IP}
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
failSwapOn: false
podLogsDir: ${LIB_DIR}/pod-logs
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
serializeImagePulls: false
CFG
cat > "${K}/etc/kube-proxy.yaml" <<CFG
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "${K}/etc/kube-proxy.kubeconfig"}
hostnameOverride: ${NODE_NAME}
mode: iptables
clusterCIDR: ${POD_CIDR}
bindAddress: ${NODE_IP}
healthzBindAddress: ${NODE_IP}:10256
metricsBindAddress: ${NODE_IP}:10249
conntrack: {maxPerCore: 0}
iptables: {minSyncPeriod: 0s}
CFG
# Redis for the pods: the project's ACL users, each with a password (the
# Secrets deploy.sh writes carry them), and an admin for the tests.
if [[ ! -f "${K}/redis/passwords" ]]; then
  printf 'admin=%s\nsluice-check=%s\nsluice-controller=%s\n' "$(openssl rand -hex 12)" "$(openssl rand -hex 12)" "$(openssl rand -hex 12)" > "${K}/redis/passwords"
  chmod 600 "${K}/redis/passwords"
fi
password() { awk -F= -v u="$1" '$1 == u { print $2 }' "${K}/redis/passwords"; }
{
  echo "user default on >$(password admin) ~* &* +@all"
  sed -E 's/^user (sluice-[a-z]+) on /user \1 on >__PASSWORD_\1__ /' "${ROOT}/config/redis/users.acl" | grep '^user '
} > "${K}/redis/users.acl"
for u in sluice-check sluice-controller; do sed -i "s/__PASSWORD_${u}__/$(password "${u}")/" "${K}/redis/users.acl"; done
cat > "${K}/redis/redis.conf" <<CFG
bind ${NODE_IP}
port ${REDIS_PORT}
protected-mode no
save ""
appendonly no
dir ${K}/redis
aclfile ${K}/redis/users.acl
CFG

# The pause image: built once per state folder.
if [[ ! -f "${K}/pause.tar" ]]; then
  (cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${K}/pause" ./hack/cluster/pause)
  python3 "${HERE}/pause/image.py" "${K}/pause.tar" registry.k8s.io/pause:3.10 "${K}/pause"
fi
ts "configuration written (${K})"

# Network, before anything binds to the node address. The two sysctls the
# bridge plugin (ip_forward) and kube-proxy (route_localnet) change are saved
# for down.sh, and whether /run/netns existed.
[[ -f "${K}/sysctl.saved" ]] || sysctl net.ipv4.ip_forward net.ipv4.conf.all.route_localnet > "${K}/sysctl.saved"
[[ -d /run/netns ]] || touch "${K}/netns.created"
if ! ip link show "${BRIDGE}" >/dev/null 2>&1; then
  ip link add "${BRIDGE}" type bridge
  ip addr add "${NODE_IP}/16" dev "${BRIDGE}"
  ip link set "${BRIDGE}" up
fi
# The Service range stays on the bridge: a Service address kube-proxy has
# not translated (yet) goes nowhere rather than out by the default route.
ip route replace "${SERVICE_CIDR}" dev "${BRIDGE}"
ts "network ready (${BRIDGE} ${NODE_IP}/16)"

# start NAME COMMAND...: runs COMMAND in the background, logs to
# K/logs/NAME.log, its pid in K/NAME.pid.
start() { local name="$1"; shift; "$@" > "${K}/logs/${name}.log" 2>&1 & echo $! > "${K}/${name}.pid"; }
# wait_for WHAT SECONDS COMMAND...: retries COMMAND until it succeeds.
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then echo "cluster-up: ${what} not ready after ${secs}s; logs in ${K}/logs" >&2; exit 1; fi
    sleep 0.3
  done
}

mkdir -p "${K}/etcd-data"
start etcd "${ASSETS}/etcd" --name "${NODE_NAME}" --data-dir "${K}/etcd-data" \
  --listen-client-urls "http://${NODE_IP}:${ETCD_CLIENT_PORT}" --advertise-client-urls "http://${NODE_IP}:${ETCD_CLIENT_PORT}" \
  --listen-peer-urls "http://${NODE_IP}:${ETCD_PEER_PORT}" --initial-advertise-peer-urls "http://${NODE_IP}:${ETCD_PEER_PORT}" \
  --initial-cluster "${NODE_NAME}=http://${NODE_IP}:${ETCD_PEER_PORT}" --listen-metrics-urls "" --unsafe-no-fsync
start containerd containerd --config "${K}/etc/containerd.toml"
start redis redis-server "${K}/redis/redis.conf"
start apiserver "${ASSETS}/kube-apiserver" \
  --etcd-servers="http://${NODE_IP}:${ETCD_CLIENT_PORT}" \
  --bind-address="${NODE_IP}" --advertise-address="${NODE_IP}" --secure-port="${APISERVER_PORT}" \
  --tls-cert-file="${PKI}/apiserver.crt" --tls-private-key-file="${PKI}/apiserver.key" \
  --client-ca-file="${PKI}/ca.crt" --token-auth-file="${PKI}/tokens.csv" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="${PKI}/sa.pub" --service-account-signing-key-file="${PKI}/sa.key" \
  --service-cluster-ip-range="${SERVICE_CIDR}" --allow-privileged=true \
  --kubelet-preferred-address-types=InternalIP --cert-dir="${K}/pki/apiserver-certdir" \
  --requestheader-client-ca-file="${PKI}/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="${PKI}/front-proxy-client.crt" --proxy-client-key-file="${PKI}/front-proxy-client.key" \
  --enable-aggregator-routing=true
wait_for containerd 60 ctr -a "${CONTAINERD_SOCK}" version
ctr_k8s image import "${K}/pause.tar" >/dev/null
ts "containerd up, pause image imported"
wait_for kube-apiserver 120 "${KUBECTL}" get --raw /readyz
ts "API server ready"

start kcm "${ASSETS}/kube-controller-manager" --kubeconfig="${K}/etc/kcm.kubeconfig" \
  --authentication-kubeconfig="${K}/etc/kcm.kubeconfig" --authorization-kubeconfig="${K}/etc/kcm.kubeconfig" \
  --bind-address="${NODE_IP}" --secure-port=11257 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="${PKI}/sa.key" --root-ca-file="${PKI}/ca.crt" \
  --cluster-signing-cert-file="${PKI}/ca.crt" --cluster-signing-key-file="${PKI}/ca.key" \
  --service-cluster-ip-range="${SERVICE_CIDR}" --controllers='*,-nodeipam'
start scheduler "${ASSETS}/kube-scheduler" --kubeconfig="${K}/etc/scheduler.kubeconfig" \
  --authentication-kubeconfig="${K}/etc/scheduler.kubeconfig" --authorization-kubeconfig="${K}/etc/scheduler.kubeconfig" \
  --bind-address="${NODE_IP}" --secure-port=11259 --leader-elect=false
start kubelet "${ASSETS}/kubelet" --config="${K}/etc/kubelet.yaml" --kubeconfig="${K}/etc/kubelet.kubeconfig" \
  --hostname-override="${NODE_NAME}" --node-ip="${NODE_IP}" \
  --root-dir="${LIB_DIR}/kubelet" --cert-dir="${LIB_DIR}/kubelet/pki" -v=2
start kube-proxy "${ASSETS}/kube-proxy" --config="${K}/etc/kube-proxy.yaml"
wait_for "the node" 120 sh -c "'${KUBECTL}' get node '${NODE_NAME}' | grep -q ' Ready'"
ts "node Ready"
wait_for "the default ServiceAccount" 60 "${KUBECTL}" -n default get serviceaccount default
wait_for "redis" 30 redis-cli -h "${NODE_IP}" -p "${REDIS_PORT}" --user default --pass "$(password admin)" --no-auth-warning ping
ts "cluster up: KUBECONFIG=${KUBECONFIG}"
