# A one-node Kubernetes cluster on this machine (hack/cluster): kubelet,
# containerd, kube-proxy and the control plane, for trying Sluice in real
# pods and for test/cluster, which `make test` runs. Needs root.

# The node's binaries beside the envtest ones, and its Debian packages.
NODE_COMPONENTS := kubelet kube-proxy kube-controller-manager kube-scheduler
NODE_PACKAGES := containerd=containerd runc=runc /usr/lib/cni/bridge=containernetworking-plugins \
  iptables=iptables conntrack=conntrack openssl=openssl

# `make test` runs test/cluster, which needs the node's parts.
test: cluster-node

.PHONY: cluster-node
cluster-node: envtest ## Install containerd, runc and the CNI plugins (Debian) and build kubelet, kube-proxy, kube-controller-manager and kube-scheduler into bin/k8s, once.
	hack/install-deps.sh $(NODE_PACKAGES)
	K8S_VERSION=$(K8S_VERSION) hack/build-k8s.sh $(NODE_COMPONENTS) >/dev/null

.PHONY: cluster-up
cluster-up: cluster-node ## Start the one-node cluster (kubeconfig: bin/cluster/kubeconfig).
	K8S_VERSION=$(K8S_VERSION) hack/cluster/up.sh

.PHONY: cluster-deploy
cluster-deploy: ## Install Sluice on the node from its release artifacts: the image (make image) and dist/install.yaml (make build-installer).
	$(MAKE) --no-print-directory image PLATFORMS=linux/$(shell $(GO) env GOARCH)
	$(MAKE) --no-print-directory build-installer
	K8S_VERSION=$(K8S_VERSION) hack/cluster/deploy.sh

.PHONY: cluster-down
cluster-down: ## Stop the node and undo what it changed on the machine (processes, mounts, cgroups, iptables, sysctls, the bridge).
	K8S_VERSION=$(K8S_VERSION) hack/cluster/down.sh
