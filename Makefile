# velo-go — one Makefile for the whole workspace.
#
#   make demo    the two-process rendezvous demo (installs what it needs first)
#   make test    every test of every module (installs what it needs first)
#
# Each area of the tree keeps its targets in mk/<area>.mk and appends its test and benchmark
# targets to TEST_TARGETS and BENCH_TARGETS, so `make test` and `make bench` run all of them.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
MODULES := velo velo/discovery/etcd velo/examples/cluster ucx verbs mlx5dv rdmacm lanes tools/ibcheck tools/velobench test

# Tests must never wait forever; a package that runs past this fails with a goroutine dump.
# They run without the caller's cluster credentials: a transport takes those from the environment
# (docs/security.md), and the suites set the credentials they test themselves.
TEST_TIMEOUT ?= 600s
VELO_CREDENTIAL_VARS := VELO_CLUSTER_SECRET VELO_CLUSTER_SECRET_NEXT VELO_CLUSTER_SECRET_FILE VELO_TLS_CA VELO_TLS_CERT VELO_TLS_KEY VELO_TLS_CRL
GOTEST := env $(addprefix -u ,$(VELO_CREDENTIAL_VARS)) $(GO) test -count=1 -timeout $(TEST_TIMEOUT)

TEST_TARGETS :=
BENCH_TARGETS :=
LINT_TARGETS :=

.DEFAULT_GOAL := help

# velo's UCX transport refuses to start on a UCX that serves software RMA without checking keys
# (docs/security.md, "Software RMA and the UCX guard"), so everything that runs it here — the demos,
# the first example, ibcheck and the velo-level UCX suites — links the static UCX of make ucx-static,
# whose patch set refuses such requests. A recipe runs its go commands behind $(VELO_UCX_GO) and
# lists $(VELO_UCX_DEP) among its prerequisites: the build tag goes in through GOFLAGS, so the go
# commands a test starts for itself (go build of an example, of a fault node) link the same UCX, and
# the build's stamp goes into CGO_CPPFLAGS (UCX_STATIC_GO, mk/ucx-static.mk) so that a rebuilt UCX
# is never hidden by a cached binary. With UCX_DIR set, that UCX is linked instead, as everywhere;
# one without the guard then needs VELO_UCX_TRUST_NETWORK=1 on the command line.
ifeq ($(strip $(UCX_DIR)),)
VELO_UCX_DEP := ucx-static
VELO_UCX_GO = $(UCX_STATIC_GO) GOFLAGS="$${GOFLAGS:+$$GOFLAGS }-tags=ucx_static"
else
VELO_UCX_DEP :=
VELO_UCX_GO :=
endif

include $(sort $(wildcard mk/*.mk))

.PHONY: help deps build test lint fmt demo bench clean

help:
	@echo "make demo      run the two-process rendezvous demo"
	@echo "make demo-cluster  N members (default 4) found through discovery, payloads all-to-all"
	@echo "make test      run every test (installs Debian packages when missing)"
	@echo "make bench     print the benchmark ratio tables"
	@echo "make velobench bin/velobench, the two-node benchmark (velobench local, or target and initiator; docs/velobench.md)"
	@echo "make test-velobench  velobench's tests: local sweeps, outputs, refusals, two namespaces over filesystem and etcd"
	@echo "make bench-scale  what each peer costs an instance: 100 to 1,000 light members on one etcd"
	@echo "               (bench-scale-etcd), then 16, 64, 128 velo processes fetching from each other with"
	@echo "               the default and a small endpoint budget (bench-scale-instances; docs/performance.md)"
	@echo "make soak      owners and consumers with random stalls, kills and restarts for SOAK (10m)"
	@echo "make build     build every module"
	@echo "make lint      gofmt, go vet and staticcheck of every module (go.work's and tools/devtools), and the layers"
	@echo "               and package-level state of every package (archcheck, docs/architecture.md \"Layers\")"
	@echo "make layers-doc  write archcheck's layer table into docs/architecture.md"
	@echo "make release VERSION=v0.1.0  a dry run of the release in a clone of HEAD; DRY_RUN=0 also"
	@echo "               runs make test on it and makes the release commit and tags here (never pushed)"
	@echo "make test-release  the release command's tests, the API check, the naming rules and the"
	@echo "               file-proxy test of a release of HEAD (part of make test)"
	@echo "make tidy      go mod tidy for every module, run on a release of HEAD in a clone (go.mod and go.sum committed first)"
	@echo "make devtools  build the pinned tools (staticcheck, apidiff), the release command and archcheck into bin/devtools"
	@echo "make deps      install the Debian packages of scripts/debian-packages.txt"

deps:
	@scripts/deps.sh

build: deps
	@for m in $(MODULES); do echo "build $$m"; (cd $$m && $(GO) build ./...); done
	@for m in $(MODULES); do echo "build $$m (CGO_ENABLED=0)"; (cd $$m && CGO_ENABLED=0 $(GO) build ./...); done

# The suites run TEST_JOBS at a time, each suite's output printed whole when it ends. The static
# UCX build goes first: it is the longest single step, and much of it (configure) uses one core;
# the CUDA build of the same UCX (test-cuda) goes second, beside it.
# The suites of TEST_ALONE run afterwards, alone: they put a bridge with an address into this
# network namespace for their hosts, and UCX in another suite's process, which offers every
# interface it finds when it starts, fails to connect (UCS_ERR_UNREACHABLE) or stalls when that
# interface goes away under it.
TEST_JOBS ?= 2
TEST_ALONE = test-faults test-rails
TEST_ORDER = $(filter test-static test-cuda,$(TEST_TARGETS)) $(filter-out test-static test-cuda $(TEST_ALONE),$(TEST_TARGETS))
test: deps
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory --output-sync=target -j$(TEST_JOBS) $(TEST_ORDER); \
	$(MAKE) --no-print-directory --output-sync=target -j1 $(filter $(TEST_ALONE),$(TEST_TARGETS)); \
	echo "make test: all test targets passed in $$(( $$(date +%s) - start ))s: $(TEST_ORDER) $(filter $(TEST_ALONE),$(TEST_TARGETS))"

bench: deps $(BENCH_TARGETS)

# staticcheck is pinned in tools/devtools/go.mod; make devtools builds it (mk/release.mk). The
# modules are those of go.work (go list -m), all but the root, which holds no packages, so a module
# added to the workspace is linted without an edit here; tools/devtools, outside the workspace, has
# lint-devtools. Every check runs on every module before lint fails, so one run lists all findings.
lint: deps devtools $(LINT_TARGETS)
	@rc=0; out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; rc=1; fi; \
	dirs=$$($(GO) list -m -f '{{.Dir}}'); mods=; \
	for d in $$dirs; do m=$${d#$(CURDIR)}; m=$${m#/}; if [ -n "$$m" ]; then mods="$$mods $$m"; fi; done; \
	for m in $$mods; do echo "vet $$m"; (cd $$m && $(GO) vet ./...) || rc=1; done; \
	for m in $$mods; do echo "staticcheck $$m"; (cd $$m && $(STATICCHECK) ./...) || rc=1; done; \
	exit $$rc

fmt:
	gofmt -w $$(git ls-files '*.go')
