# The map checked against the code (docs/architecture.md, "Layers"): tools/devtools/archcheck.
#   lint-arch   (part of make lint) every package of the workspace sits in a row of the layer table
#               and imports only lower layers, from every non-test file whatever its build
#               constraints; no library package keeps mutable state at package level; the doc
#               prints the same table. It prints the table it checked.
#   layers-doc  writes the table of tools/devtools/archcheck/layers.go into docs/architecture.md
# The state check type-checks the library with cgo, so it needs the headers of make deps.
ARCHCHECK = $(DEVTOOLS_BIN)/archcheck

.PHONY: lint-arch layers-doc
LINT_TARGETS += lint-arch

lint-arch: deps devtools
	@$(ARCHCHECK) -repo $(CURDIR)

layers-doc: devtools
	@$(ARCHCHECK) -repo $(CURDIR) -write-doc
