# Release targets, included by the Makefile: the image (ko), the installer.

KO_VERSION ?= v0.19.1
KO := $(BIN)/ko-$(KO_VERSION)
# The image `make image` builds and `make image-push` pushes; build-installer
# pins it by digest into dist/install.yaml.
IMG ?= ghcr.io/sluice-dev/sluice:$(VERSION)
IMAGE_LAYOUT := $(BIN)/image
PLATFORMS ?= linux/amd64,linux/arm64

# ko reads .ko.yaml (base image, flags, ldflags from VERSION and REVISION).
# IMG without its tag or digest (a registry's :port stays).
IMG_REPO = $(shell r='$(IMG)'; r=$${r%%@*}; case $${r##*/} in (*:*) r=$${r%:*};; esac; echo $$r)
IMG_TAG  = $(shell r='$(IMG)'; r=$${r%%@*}; case $${r##*/} in (*:*) echo $${r##*:};; (*) echo latest;; esac)
KO_ENV = VERSION=$(VERSION) REVISION=$(REVISION) KO_DOCKER_REPO=$(IMG_REPO)
KO_LABELS = --image-label org.opencontainers.image.source=https://github.com/sluice-dev/sluice \
  --image-label org.opencontainers.image.version=$(VERSION) --image-label org.opencontainers.image.revision=$(REVISION)

.PHONY: image
image: $(KO) ## Build the image for $(PLATFORMS) without a Docker daemon into the OCI layout bin/image (ko).
	rm -rf $(IMAGE_LAYOUT)
	$(KO_ENV) $(KO) build ./cmd/manager --bare --push=false --platform=$(PLATFORMS) $(KO_LABELS) --oci-layout-path=$(IMAGE_LAYOUT) \
	  || { echo "make image: ko could not build the image; it pulls the base image (.ko.yaml, or KO_DEFAULTBASEIMAGE) from its registry, which must be reachable" >&2; exit 1; }
	@echo "image: $(IMAGE_LAYOUT), index $$(python3 -c 'import json; print(json.load(open("$(IMAGE_LAYOUT)/index.json"))["manifests"][-1]["digest"])')"

.PHONY: image-push
image-push: $(KO) ## Build and push the image to IMG (a repository:tag) for $(PLATFORMS).
	$(KO_ENV) $(KO) build ./cmd/manager --bare --platform=$(PLATFORMS) $(KO_LABELS) --tags=$(IMG_TAG)

.PHONY: build-installer
build-installer: envtest ## Write dist/install.yaml: config/default with IMG pinned by digest (IMG's own, or bin/image's).
	IMG=$(IMG) KUBECTL=$(BIN)/k8s/$(K8S_VERSION)/kubectl LAYOUT=$(IMAGE_LAYOUT) OUT=dist/install.yaml hack/build-installer.sh

$(KO):
	GOBIN=$(BIN)/.tmp-ko $(GO) install github.com/google/ko@$(KO_VERSION)
	mv $(BIN)/.tmp-ko/ko $@ && rm -rf $(BIN)/.tmp-ko
