# Soak, included by the Makefile: Sluice's cluster processes (manager
# controller and manager check) at a steady load for SOAK_DURATION over
# every algorithm, with key churn and a policy edit a minute, against
# envtest and redis-server; it fails unless memory, goroutines,
# descriptors, connections and Redis memory stay flat after the warm-up,
# or when any answer is an error. Not part of `make test`.

SOAK_DURATION ?= 20m
SOAK_RATE ?= 500
# More hack/soak flags, e.g. SOAK_FLAGS='-keep -sample-every 5s'.
SOAK_FLAGS ?=

.PHONY: soak
soak: deps envtest build ## Soak: manager check and controller for SOAK_DURATION (20m; SOAK_DURATION=2m to try) at SOAK_RATE checks/s; fails unless flat after warm-up.
	KUBEBUILDER_ASSETS="$(BIN)/k8s/$(K8S_VERSION)" $(GO) run ./hack/soak -manager $(BIN)/manager -duration $(SOAK_DURATION) -rate $(SOAK_RATE) $(SOAK_FLAGS)
