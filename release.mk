# Release targets, included by the Makefile: the image, the installer, the
# Helm chart and releases. Their tools are pinned and built from the Go
# module proxy into bin/ (crane, helm); the image needs no other registry.

CRANE_VERSION ?= v0.22.1
CRANE := $(BIN)/crane-$(CRANE_VERSION)
HELM_VERSION ?= v3.22.0
HELM := $(BIN)/helm-$(HELM_VERSION)
# The Kubernetes minor version `helm template` and `helm lint` assume by
# default (Helm's release builds set it from their client-go; go install
# does not): client-go v0.37 in Helm v3.22.
HELM_K8S_MINOR ?= 37
# The image `make image` builds (IMG's tag is not part of it: the layout is
# named by digest), `make image-push` pushes and build-installer pins.
IMG ?= ghcr.io/sluice-dev/sluice:$(VERSION)
IMAGE_LAYOUT ?= $(BIN)/image
PLATFORMS ?= linux/amd64,linux/arm64
DIST ?= dist

# `make test` builds the tools test/release runs (and finds by these names).
test: release-tools

.PHONY: release-tools
release-tools: $(CRANE) $(HELM) ## Build crane and helm (pinned) into bin/.

.PHONY: image
image: $(CRANE) ## Build the image (linux/amd64, linux/arm64; PLATFORMS) into the OCI layout bin/image: no Docker daemon, no registry.
	test -d /usr/share/ca-certificates/mozilla || hack/install-deps.sh update-ca-certificates=ca-certificates
	CRANE=$(CRANE) OUT=$(IMAGE_LAYOUT) PLATFORMS=$(PLATFORMS) VERSION=$(VERSION) REVISION=$(REVISION) GO=$(GO) hack/build-image.sh

.PHONY: image-push
image-push: $(CRANE) ## Push the image in bin/image (make image first) to IMG (a repository:tag); prints its digest.
	@test -f $(IMAGE_LAYOUT)/index.json || { echo "image-push: $(IMAGE_LAYOUT) holds no image: run 'make image' first" >&2; exit 1; }
	$(CRANE) push $(IMAGE_LAYOUT) $(IMG)

.PHONY: build-installer
build-installer: envtest ## Write dist/install.yaml: config/default but the Redis Secrets, IMG pinned by digest (its own, or bin/image's).
	IMG=$(IMG) KUBECTL=$(BIN)/k8s/$(K8S_VERSION)/kubectl LAYOUT=$(IMAGE_LAYOUT) OUT=$(DIST)/install.yaml hack/build-installer.sh

.PHONY: chart
chart: $(HELM) ## Lint and package charts/sluice into dist/ (VERSION=vX.Y.Z sets its version; the image digest from bin/image).
	HELM=$(HELM) OUT=$(DIST) VERSION=$(VERSION) \
	  DIGEST=$$(test -f $(IMAGE_LAYOUT)/index.json && python3 -c 'import json; print(json.load(open("$(IMAGE_LAYOUT)/index.json"))["manifests"][-1]["digest"])') \
	  hack/package-chart.sh

.PHONY: plugin-dist
plugin-dist: ## Build the kubectl plugin's archives (linux, darwin; amd64, arm64) and krew manifest into dist/ (VERSION=vX.Y.Z; part of make release).
	VERSION=$(VERSION) REVISION=$(REVISION) OUT=$(DIST) GO=$(GO) hack/package-plugin.sh

.PHONY: release
release: envtest $(CRANE) $(HELM) ## Release VERSION=vX.Y.Z: build the image, write dist/install.yaml, the chart and the kubectl plugin's archives, then tag.
	VERSION=$(VERSION) IMG=$(IMG) MAKE="$(MAKE)" IMAGE_LAYOUT=$(IMAGE_LAYOUT) DIST=$(DIST) CRANE=$(CRANE) HELM=$(HELM) GO=$(GO) \
	  KUBECTL=$(BIN)/k8s/$(K8S_VERSION)/kubectl hack/release.sh

$(CRANE):
	GOBIN=$(BIN)/.tmp-crane $(GO) install github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)
	mv $(BIN)/.tmp-crane/crane $@ && rm -rf $(BIN)/.tmp-crane

$(HELM):
	GOBIN=$(BIN)/.tmp-helm $(GO) install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
	  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)" \
	  helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(BIN)/.tmp-helm/helm $@ && rm -rf $(BIN)/.tmp-helm
