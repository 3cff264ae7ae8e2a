# vkubelet: the two commands of the quick start are `make up` and `make test`.
GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/vkubelet/vkubelet/internal/version.Version=$(VERSION)
# Integration tests start real control planes; the first run also builds them.
TEST_TIMEOUT ?= 45m

.PHONY: all setup build controlplane up test unit vet fmt-check fuzz fault image manifests proto conformance

all: build

setup:
	@scripts/setup.sh

# One compilation of the code serves `make build`, `make vet`, the image and the
# binaries the tests build: static (the image has no C library) with trimmed
# paths (reproducible). Compiled with other flags, each would compile the whole
# dependency graph again; only the race-instrumented test binaries do.
STATIC := CGO_ENABLED=0
STATIC_FLAGS := -trimpath

# bin/vkubelet is the node (the image's binary), bin/vkubeletctl the lab (up,
# bench, controlplane build): one go build for both.
build: setup
	$(STATIC) $(GO) build $(STATIC_FLAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/vkubelet ./cmd/vkubeletctl

# The container image, without a container daemon (internal/lab/image): the node's static binary
# run as user 65532, written as an OCI layout archive that `ctr images import` loads
# and `crane push bin/vkubelet-image.tar <ref>` pushes. One commit, one digest.
IMAGE_REPO ?= ghcr.io/vkubelet/vkubelet
image:
	@mkdir -p $(BIN)
	$(STATIC) $(GO) run $(STATIC_FLAGS) ./internal/lab/image/mkimage -version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null)" \
		-created "$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)}" -repo $(IMAGE_REPO) -out $(BIN)/vkubelet-image.tar

# deploy/vkubelet.yaml: the chart (charts/vkubelet) rendered with its defaults, for
# kubectl apply and kustomize; a test checks that it stays the chart's rendering.
manifests: controlplane
	@helm="$$($(BIN)/vkubeletctl controlplane build 2>/dev/null | grep '/helm$$')"; mkdir -p deploy; \
	{ printf '%s\n' '# vkubelet with the mock provider, rendered from charts/vkubelet by `make manifests`;' \
	  '# edit the chart, not this file. kubectl create namespace vkubelet-system first.'; \
	  "$$helm" template vkubelet charts/vkubelet --namespace vkubelet-system; } > deploy/vkubelet.yaml

# The provider protocol's generated Go code (checked in): protoc from Debian's
# protobuf-compiler, the Go plugins pinned here.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
proto:
	@command -v protoc >/dev/null || { echo "make proto: protoc is needed (apt-get install protobuf-compiler)"; exit 1; }
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(CURDIR)/$(BIN)/tools:$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative providers/remote/api/v1alpha1/provider.proto

# Builds (first time, several minutes) or finds the cached control-plane binaries,
# and links kubectl into bin/ for convenience.
controlplane: build
	@ln -sf "$$($(BIN)/vkubeletctl controlplane build | grep '/kubectl$$')" $(BIN)/kubectl

# Starts a local control plane and a virtual node; prints `export KUBECONFIG=...`.
up: controlplane
	$(BIN)/vkubeletctl up $(UP_ARGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(STATIC) $(GO) vet $(STATIC_FLAGS) ./...

# Every test, unit and integration, with the race detector; each fuzz target's
# seed corpus (testdata/fuzz included) runs as a test among them. `make fuzz`
# fuzzes. The integration test packages wait for the control plane's binaries,
# so those are built first; then TEST_P packages run at once, the longest first
# (TEST_FIRST), since most of their time is spent waiting on the processes they
# start. scripts/test.sh prints how long each phase took.
TEST_P ?= 4
TEST_FIRST := ./cmd/vkubeletctl ./cmd/vkubelet ./internal/lab/fault ./internal/lab/deploy ./providers/slurm ./internal/process/agent \
	./providers/remote ./pod ./providers/kube ./resolve ./providers/cri
test:
	@GO="$(GO)" TEST_P="$(TEST_P)" TEST_TIMEOUT="$(TEST_TIMEOUT)" TEST_FIRST="$(TEST_FIRST)" scripts/test.sh

# Each fuzz target for FUZZTIME; too long for `make test` (each package's first
# target compiles its whole dependency graph with coverage instrumentation).
# docs/RELIABILITY.md has the figures.
FUZZTIME ?= 15s
FUZZ_TARGETS := kubeletapi:FuzzParseLogOptions kubeletapi:FuzzRoutes kubeletapi:FuzzStreamUpgrades \
	internal/wire/statuspatch:FuzzStatusPatchAgreesWithTheStrategicMergeDiff internal/wire/podwire:FuzzRawPodDecode \
	internal/wire/podwire:FuzzRawPodListDecode internal/wire/podwire:FuzzWatchEventDecode \
	internal/wire/apiwire:FuzzEnvelope providers/remote:FuzzPodRequest providers/interlink:FuzzStatusAnswer \
	internal/compact/podpack:FuzzPackEncoded internal/compact/podpack:FuzzUnpackEncoded internal/compact/podpack:FuzzCondense \
	internal/compact/tokenpack:FuzzPack internal/compact/tokenpack:FuzzCondense
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -short -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) ./$$pkg/ || exit 1; \
	done

# Unit tests only: no control plane.
unit:
	$(GO) test -race -short ./...

# Faults too long for `make test` (docs/RELIABILITY.md quotes their figures): the
# node agent with 10,000 pods under a 64 MiB Go memory limit.
fault: controlplane
	$(BIN)/vkubeletctl bench --pods 10000 --agent-env=GOMEMLIMIT=64MiB

# Kubernetes' own e2e tests against a vkubelet CRI node on this machine (root):
# e2e.test, the kubelet and the test images built from the control plane's
# Kubernetes version (the first time takes long), then `vkubeletctl up --provider
# cri` and the selected tests; not part of `make test`. CONFORMANCE_ARGS narrows
# the selection (--focus, --skip, --label-filter). docs/CONFORMANCE.md.
CONFORMANCE_ARGS ?=
conformance: build
	$(BIN)/vkubeletctl conformance $(CONFORMANCE_ARGS)
