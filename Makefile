# vkubelet: the two commands of the quick start are `make up` and `make test`.
GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
# The commit's time, not the build's: the same commit builds the same binary.
DATE    ?= $(shell git log -1 --format=%cI 2>/dev/null)
LDFLAGS := -X github.com/vkubelet/vkubelet/internal/version.Version=$(VERSION) \
	-X github.com/vkubelet/vkubelet/internal/version.Commit=$(COMMIT) -X github.com/vkubelet/vkubelet/internal/version.Date=$(DATE)
# Integration tests start real control planes; the first run also builds them.
TEST_TIMEOUT ?= 45m

.PHONY: all setup build controlplane up test flakes unit vet fmt-check fuzz fault soak skew image manifests chart-docs proto release conformance

all: build

# What the use needs (scripts/setup.sh): the mock's build and `make up` by
# default; SETUP="--cri" (--slurm, --python, --test, --all) adds the rest.
SETUP ?=
setup:
	@scripts/setup.sh $(SETUP)

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

# A release into dist/ (internal/lab/release): vkubelet for linux/amd64 and
# linux/arm64 with SHA256SUMS, an SPDX SBOM, the image as a multi-platform index
# (an OCI layout archive) and the chart packaged. With REGISTRY (ghcr.io/vkubelet,
# or host:port of a local registry with RELEASE_FLAGS=-plain-http) it pushes the
# image, its SBOM and the chart there. The release workflow runs it on a tag.
REGISTRY ?=
RELEASE_FLAGS ?=
release: controlplane
	@case "$(VERSION)" in v*.*.*) ;; *) echo "make release: VERSION=$(VERSION) is not a release tag (make release VERSION=v1.2.3)"; exit 1;; esac
	$(STATIC) $(GO) run $(STATIC_FLAGS) ./internal/lab/release/mkrelease -version $(VERSION) -revision "$(COMMIT)" \
		-created "$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)}" -out dist \
		$(if $(REGISTRY),-registry $(REGISTRY)) $(RELEASE_FLAGS)

# deploy/vkubelet.yaml: the chart (charts/vkubelet) rendered with its defaults, for
# kubectl apply and kustomize, without its hooks (helm test's, and the uninstall's
# node removal, which kubectl apply would run at once); a test checks that it
# stays the chart's rendering.
manifests: controlplane
	@helm="$$($(BIN)/vkubeletctl controlplane build --all 2>/dev/null | grep '/helm$$')"; mkdir -p deploy; \
	{ printf '%s\n' '# vkubelet with the mock provider, rendered from charts/vkubelet by `make manifests`;' \
	  '# edit the chart, not this file. kubectl create namespace vkubelet-system first.'; \
	  "$$helm" template vkubelet charts/vkubelet --namespace vkubelet-system --no-hooks; } > deploy/vkubelet.yaml

# charts/vkubelet/README.md: its README.md.gotmpl with a table of the values
# from values.yaml's comments (internal/lab/chartdoc); a test fails when it is stale.
chart-docs:
	$(GO) run ./internal/lab/chartdoc/mkchartdoc -chart charts/vkubelet

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

# Builds (first time, several minutes) or finds the cached control-plane binaries
# and every tool the tests use (kwok, helm, CoreDNS, metrics-server), and links
# kubectl into bin/ for convenience.
controlplane: build
	@ln -sf "$$($(BIN)/vkubeletctl controlplane build --all | grep '/kubectl$$')" $(BIN)/kubectl

# Starts a local control plane and a virtual node; prints `export KUBECONFIG=...`.
# It builds only the control plane first; `up` builds what else its node needs
# (metrics-server with --netns, CoreDNS for the CRI provider) when it needs it.
up: build
	@ln -sf "$$($(BIN)/vkubeletctl controlplane build | grep '/kubectl$$')" $(BIN)/kubectl
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

# The flake finder (scripts/flakes.sh, docs/TESTING.md): `make test` FLAKES_RUNS
# times in CI's mode with every core kept busy, the first run from empty caches
# with FLAKES_COLD=1; or, with FLAKES_PKGS, those packages -count FLAKES_COUNT.
# It prints each failed test with the number of runs it failed in.
flakes:
	@GO="$(GO)" scripts/flakes.sh

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

# A mock node with 1,000 pods under churn (5 deletes a second and their
# replacements, label updates, exec, followed logs) for 40 minutes, its heap, RSS, goroutines,
# descriptors, sockets and provider records sampled; fails if one grows or an
# operation fails after a 15-minute warm-up (docs/RELIABILITY.md). SOAK_ARGS adds
# flags (--duration 2h).
SOAK_ARGS ?=
soak: controlplane
	$(BIN)/vkubeletctl soak $(SOAK_ARGS)

# The version-skew matrix (docs/COMPATIBILITY.md): for every Kubernetes release
# the lab builds (the first build of each takes about 10 minutes), the node's
# wire-facing integration tests and `bench --pods 1000`; prints the matrix and
# fails if a test did. SKEW_ARGS adds flags (--versions v1.34.4 --bench-pods 0).
SKEW_ARGS ?=
skew: controlplane
	$(BIN)/vkubeletctl skew $(SKEW_ARGS)

# Kubernetes' own e2e tests against a vkubelet CRI node on this machine (root):
# e2e.test, the kubelet and the test images built from the control plane's
# Kubernetes version (the first time takes long), then `vkubeletctl up --provider
# cri` and the selected tests; not part of `make test`. CONFORMANCE_ARGS narrows
# the selection (--focus, --skip, --label-filter). docs/CONFORMANCE.md.
CONFORMANCE_ARGS ?=
conformance: build
	$(BIN)/vkubeletctl conformance $(CONFORMANCE_ARGS)
