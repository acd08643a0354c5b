# Pillar toolkit. `make demo` runs the main job; `make test` runs the tests.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)
VERSITYGW_VERSION := v1.8.0
STATICCHECK_VERSION := v0.8.2
# python3-*: the Python client and its tests; protobuf-compiler(-grpc): its stubs
# (make python-stubs); prometheus: promtool checks the alert rules under deploy/.
DEB_PKGS := librocksdb-dev g++ postgresql-doc-15 python3-grpcio python3-protobuf python3-numpy \
  protobuf-compiler protobuf-compiler-grpc prometheus iptables iproute2

.PHONY: all build test check test-race test-netns bench demo deps lint tools chaos python-stubs

all: build

## deps: install what a fresh machine lacks (Debian packages only when missing).
deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

demo-deps: deps

## python-stubs: regenerate the Python client's gRPC and record stubs from the .proto files
## (a test in clients/python fails when the committed ones are stale).
python-stubs:
	clients/python/gen-stubs.sh

## tools: the S3 server the tests use (versitygw), from the Go module proxy.
tools: $(BIN)/versitygw

$(BIN)/versitygw:
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

build: deps
	$(GO) build -o $(BIN)/pillar ./cmd/pillar
	CGO_ENABLED=0 $(GO) build -o $(BIN)/pillar-job ./jobs/cmd/pillar-job

## test: every package, several at a time (go test's default -p, one per core). Packages
## whose code runs goroutines (servers, pools, runners, refresh loops) run under -race;
## their timing tests run on a fake clock (internal/clock), so parallel load cannot
## starve them. PILLAR_REQUIRE_POSTGRES=1 makes the control plane's PostgreSQL tests
## fail instead of skipping when PostgreSQL is not reachable.
RACE_PKGS := ./internal/clock/... ./cobbled ./cobbled/control/... ./cobbled/router/... ./cobbled/wire/... \
  ./cobbled/mget/... ./bench/switchbench/... ./internal/health/... \
  ./cobbled/servepb/... ./lorry/... ./jobs/... ./pillar/... ./sstbuilder/... \
  ./internal/objstore/... ./internal/s3test/... ./internal/freeport/... ./badinput/...
TEST_ENV := PILLAR_VERSITYGW=$(BIN)/versitygw PILLAR_REQUIRE_POSTGRES=1 PILLAR_REQUIRE_PROMTOOL=1 PILLAR_REQUIRE_PYTHON=1
test: deps tools
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	  test -z "$$unformatted" || { echo "gofmt: these files are not formatted:"; echo "$$unformatted"; exit 1; }
	$(GO) vet ./...
	@race="$$($(GO) list $(RACE_PKGS))"; plain="$$($(GO) list ./... | grep -vxF "$$race")"; rc=0; \
	echo "== go test -race ($$(echo "$$race" | wc -l) packages)"; \
	$(TEST_ENV) $(GO) test -race -count=1 -timeout 15m $$race || rc=1; \
	echo "== go test ($$(echo "$$plain" | wc -l) packages: CLI, harnesses, pure code)"; \
	$(TEST_ENV) $(GO) test -count=1 -timeout 15m $$plain || rc=1; \
	exit $$rc

## check: make test, then the long suites: the chaos tests (1 minute of faults, seed 1)
## and the network scenarios (make test-netns). .ci/run runs it (under CI's 20-minute
## limit on 2 cores: see CONTRIBUTING.md).
check: test
	$(TEST_ENV) PILLAR_CHAOS=1m $(GO) test -count=1 -timeout 15m -run 'Chaos' ./chaos/
	$(MAKE) test-netns

## test-netns: the short version of every network scenario on a cluster of network
## namespaces (root, iproute2, iptables), and the checker's negative test. Skips where
## namespaces are unavailable, fails instead under PILLAR_REQUIRE_NETNS=1 (.ci/run).
test-netns: deps tools
	$(TEST_ENV) PILLAR_NETNS=1 $(GO) test -count=1 -timeout 15m -v -run 'TestNetnsScenarios|TestNetnsCatchesLostRange' ./chaos/netns/

test-yt: ; @test -n "$$YT_PROXY" || { echo "make test-yt: set YT_PROXY (and YT_TOKEN); see docs/ytsaurus.md"; exit 2; }; $(GO) test -count=1 -timeout 60m -v -run 'OnCluster|TestYTIntegration' ./pillar/ytstore/ ./jobs/
test-race: deps tools
	PILLAR_VERSITYGW=$(BIN)/versitygw $(GO) test -race -count=1 -timeout 20m ./...

bench: build tools
	PILLAR_VERSITYGW=$(BIN)/versitygw $(GO) test -run '^$$' -bench . -benchtime 2x ./... | tee bench.txt

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) && $(BIN)/staticcheck ./... || echo "staticcheck unavailable or reported issues (see above)"

demo: build
	$(BIN)/pillar --log-level warn demo --out demo-out

## chaos: the whole system under seeded faults, 5 minutes per seed (CHAOS_SEEDS="1 2 3", CHAOS_DURATION=5m).
chaos: build tools
	@for s in $${CHAOS_SEEDS:-1 2 3}; do \
	  echo "=== pillar chaos --seed $$s --duration $${CHAOS_DURATION:-5m}"; \
	  PILLAR_VERSITYGW=$(BIN)/versitygw $(BIN)/pillar chaos --seed $$s --duration $${CHAOS_DURATION:-5m} || exit 1; \
	done
bench-scale: build ; $(BIN)/pillar bench scale --out bench-out/scale $(BENCH_SCALE_FLAGS)
