# Releases (CHANGELOG.md, scripts/release, tools/devtools/release) and the repository's pinned tools.
#
#   make release VERSION=v0.1.0           a dry run: the release commit and its tags are made in a
#                                         temporary clone of HEAD, served by a file module proxy,
#                                         and checked there (go build and go vet of each released
#                                         module with GOWORK=off, and the file-proxy test); the
#                                         working tree is not touched
#   make release VERSION=v0.1.0 DRY_RUN=0 the same, then RELEASE_SUITE (make test) on the release
#                                         commit, then the current branch fast-forwards to it and
#                                         gets the tags; nothing is pushed
#   make test-release                     the release command's own tests, the API check against
#                                         the last release tags, the naming rules (release names:
#                                         no two packages share a name, no file is named after a
#                                         folder beside it), and test/release: a release commit
#                                         of HEAD (in a clone) built by fresh modules from a file
#                                         module proxy, with GOWORK=off and an empty module cache,
#                                         and every module of it checked with go mod tidy -diff
#   make tidy                             go mod tidy for every module, which cannot run in the
#                                         workspace (no proxy has the siblings' version): a release
#                                         of HEAD in a clone, go mod tidy there against its file
#                                         proxy, and the changes to go.mod and go.sum carried back
#                                         here with the siblings at their versions here (release
#                                         tidy -write); commit your go.mod and go.sum files first
#   make devtools                         the tools pinned in tools/devtools/go.mod (staticcheck,
#                                         apidiff), the release command and archcheck (mk/archcheck.mk),
#                                         into bin/devtools
#
# tools/devtools is a module of its own, outside go.work, so that the tools' dependencies never
# enter the workspace's module graph: its go commands run with GOWORK=off.
DEVTOOLS_DIR := tools/devtools
DEVTOOLS_BIN := $(CURDIR)/bin/devtools
STATICCHECK := $(DEVTOOLS_BIN)/staticcheck
RELEASE_TOOL := $(DEVTOOLS_BIN)/release
DEVTOOLS_GO := cd $(DEVTOOLS_DIR) && GOWORK=off

DRY_RUN ?= 1
RELEASE_SUITE ?= $(MAKE) test

.PHONY: devtools release test-release tidy lint-devtools
TEST_TARGETS += test-release
LINT_TARGETS += lint-devtools

# Always run: the go command rebuilds only what changed, in about a second.
devtools:
	@$(DEVTOOLS_GO) $(GO) build -o $(DEVTOOLS_BIN)/ honnef.co/go/tools/cmd/staticcheck golang.org/x/exp/cmd/apidiff ./release ./archcheck

release: deps devtools
	@VERSION='$(VERSION)' DRY_RUN='$(DRY_RUN)' RELEASE_TOOL='$(RELEASE_TOOL)' RELEASE_SUITE='$(RELEASE_SUITE)' GO='$(GO)' \
		scripts/release/release.sh

# The API check loads every released module with cgo (make deps has the headers). With no release
# tag yet it says so and passes.
test-release: deps devtools
	$(DEVTOOLS_GO) $(GOTEST) ./...
	$(RELEASE_TOOL) apicheck
	$(RELEASE_TOOL) names
	cd test && $(GOTEST) ./release/...

# The version is the first CHANGELOG.md has a section for (a clone without tags never has it
# released already); the commit and the tags stay in the clone, which goes away.
tidy: devtools
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/velo-tidy.XXXXXX"); \
	trap 'chmod -R u+w "$$tmp" 2>/dev/null; rm -rf "$$tmp"' EXIT; \
	v=$$(sed -nE 's/^##[[:space:]]+\[?(v[0-9]+\.[0-9]+\.[0-9]+[^] [:space:]]*)\]?.*/\1/p' CHANGELOG.md | head -n1); \
	if [ -z "$$v" ]; then echo "tidy: CHANGELOG.md has no version section (## [vX.Y.Z] - ...)"; exit 1; fi; \
	git clone -q --no-tags . "$$tmp/repo"; \
	git -C "$$tmp/repo" config user.name "make tidy"; git -C "$$tmp/repo" config user.email tidy@localhost; \
	git -C "$$tmp/repo" config commit.gpgsign false; git -C "$$tmp/repo" config tag.gpgsign false; \
	echo "tidy: a release $$v of HEAD in $$tmp/repo"; \
	$(RELEASE_TOOL) prepare -repo "$$tmp/repo" -version "$$v" >/dev/null; \
	$(RELEASE_TOOL) proxy -repo "$$tmp/repo" -version "$$v" -out "$$tmp/proxy"; \
	$(RELEASE_TOOL) tidy -repo "$$tmp/repo" -version "$$v" -proxy "$$tmp/proxy" -write "$(CURDIR)"

lint-devtools: devtools
	@echo "vet $(DEVTOOLS_DIR) (GOWORK=off)"
	@$(DEVTOOLS_GO) $(GO) vet ./...
	@echo "staticcheck $(DEVTOOLS_DIR) (GOWORK=off)"
	@$(DEVTOOLS_GO) $(STATICCHECK) ./...
