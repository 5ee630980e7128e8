// Command release makes the repository's releases and checks them the way a user will meet them.
//
// Every folder of the repository with a go.mod is a module of its own, and a release publishes
// all of them together under one version: the tag of the module in folder D is D/vX.Y.Z, on the
// commit whose go.mod files require their sibling modules at vX.Y.Z. Between releases the
// siblings require each other at a placeholder that only go.work satisfies, so nothing outside
// the repository can build them until a release commit exists; this command writes that commit
// and proves it works without the workspace, before anything is pushed.
//
// Subcommands (each takes -repo, the repository, "." by default; -h lists the flags):
//
//	check    -version V   refuses a malformed version, a dirty tree, an existing tag, a
//	                      CHANGELOG.md without an entry for V, a file no module zip may hold and
//	                      what names refuses
//	prepare  -version V   does what check does, then writes the release commit on the checked-out
//	                      branch and tags every released module on it (locally; nothing is pushed)
//	proxy    -version V -out DIR
//	                      writes a GOPROXY=file://DIR module proxy of every released module at V,
//	                      from its tag, with golang.org/x/mod/zip as the go command would
//	verify   -version V -proxy DIR
//	                      on the release commit: no go.mod names the placeholder, no released
//	                      go.mod has a replace, and each released module builds and vets with
//	                      GOWORK=off against that proxy and nothing else of ours
//	tidy     -version V -proxy DIR [-write CHECKOUT]
//	                      on the release commit: go mod tidy -diff in every module, with GOWORK=off
//	                      against that proxy, fails when a go.mod or go.sum would change; with
//	                      -write, runs go mod tidy and carries the changes into CHECKOUT (go mod
//	                      tidy cannot run in the workspace, whose sibling versions no proxy has)
//	apicheck              compares the exported API of every released module with its last
//	                      release tag (golang.org/x/exp/apidiff) and fails on an incompatible
//	                      change that CHANGELOG.md does not name
//	names                 fails when two packages of the repository (any module, released or
//	                      not; main and x_test packages aside) share a package name, or a Go
//	                      file is named after a folder beside it (x.go or x_test.go next to x/):
//	                      the first release freezes the names, so check runs this too
//	modules               lists the modules, their paths and whether they are released
//
// Which modules are released is decided by folder, not by package: all of them except the
// folders given to -unreleased (by default the repository root, which holds no packages; test,
// the cross-module tests; and tools/devtools, the repository's own tooling).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// defaultUnreleased are the module folders that are never tagged.
const defaultUnreleased = ".,test,tools/devtools"

// placeholder is the version at which the modules require each other between releases.
const placeholder = "v0.0.0-00010101000000-000000000000"

type command struct {
	name  string
	usage string
	run   func(args []string) error
}

var commands = []command{
	{"check", "-version V: refuse what would make a bad release", runCheck},
	{"prepare", "-version V: write the release commit and the tags", runPrepare},
	{"proxy", "-version V -out DIR: a file-system module proxy of the release", runProxy},
	{"verify", "-version V -proxy DIR: the release commit builds without the workspace", runVerify},
	{"tidy", "-version V -proxy DIR: every go.mod and go.sum of the release commit is tidy", runTidy},
	{"apicheck", "compare every released module's API with its last release", runAPICheck},
	{"names", "no two packages share a name, no file is named after a folder", runNames},
	{"modules", "list the modules", runModules},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release <command> [flags]")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", c.name, c.usage)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands {
		if c.name != os.Args[1] {
			continue
		}
		err := c.run(os.Args[2:])
		switch {
		case err == nil:
			return
		case errors.Is(err, flag.ErrHelp):
			os.Exit(0)
		case errors.Is(err, errUsage):
			fmt.Fprintf(os.Stderr, "release %s: %v\n", c.name, err)
			os.Exit(2)
		default:
			fmt.Fprintf(os.Stderr, "release %s: %v\n", c.name, err)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "release: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(2)
}

// errUsage marks a wrong command line (exit status 2).
var errUsage = errors.New("usage")

// common holds the flags every subcommand shares.
type common struct {
	repo       string
	unreleased string
	version    string
}

func newFlags(name string, c *common, withVersion bool) *flag.FlagSet {
	fs := flag.NewFlagSet("release "+name, flag.ContinueOnError)
	fs.StringVar(&c.repo, "repo", ".", "the repository (any folder inside it)")
	fs.StringVar(&c.unreleased, "unreleased", defaultUnreleased,
		"comma-separated module folders that are never released (\".\" is the repository root)")
	if withVersion {
		fs.StringVar(&c.version, "version", "", "the version to release, vMAJOR.MINOR.PATCH")
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

func (c *common) open() (*Repo, error) {
	var skip []string
	for _, s := range strings.Split(c.unreleased, ",") {
		if s = strings.TrimSpace(s); s != "" {
			skip = append(skip, s)
		}
	}
	// The default list may name folders a repository does not have; a list given by hand may not.
	return OpenRepo(c.repo, skip, c.unreleased == defaultUnreleased)
}

// start parses a subcommand's flags, checks -version where the subcommand takes one and each flag
// named in required, and opens the repository: the opening every subcommand shares.
func (c *common) start(fs *flag.FlagSet, args []string, required ...string) (*Repo, error) {
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if fs.Lookup("version") != nil {
		if err := c.needVersion(); err != nil {
			return nil, err
		}
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			return nil, fmt.Errorf("%w: -%s is required", errUsage, name)
		}
	}
	return c.open()
}

func (c *common) needVersion() error {
	if c.version == "" {
		return fmt.Errorf("%w: -version is required (for example -version v0.1.0)", errUsage)
	}
	return CheckVersion(c.version)
}

func runModules(args []string) error {
	var c common
	fs := newFlags("modules", &c, false)
	r, err := c.start(fs, args)
	if err != nil {
		return err
	}
	for _, m := range r.Modules {
		state := "released, tag " + m.Tag("vX.Y.Z")
		if !m.Released {
			state = "not released"
		}
		fmt.Printf("%-24s %-48s %s\n", m.Dir, m.Path, state)
	}
	return nil
}
