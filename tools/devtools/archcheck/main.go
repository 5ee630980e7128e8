// Command archcheck checks the repository against the map docs/architecture.md draws of it:
//
//   - every package of the workspace (the modules of go.work; main packages aside) sits in a
//     row of the layer table (layers.go), and imports, from any of its non-test files whatever
//     their build constraints, only packages of lower layers; a library package sits on its
//     floor, one layer above the highest it imports;
//   - no library package keeps mutable state at package level (state.go says what counts);
//   - docs/architecture.md prints the same table.
//
// It prints the table it checked and every problem it found, and exits 1 when there is one.
// With -write-doc it writes the table into the document instead of comparing.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	repo := flag.String("repo", ".", "the repository: the folder of its go.work")
	doc := flag.String("doc", "docs/architecture.md", "the document that prints the layer table, relative to -repo (\"\": none)")
	writeDoc := flag.Bool("write-doc", false, "write the layer table into -doc and check nothing else")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "archcheck takes flags only (-h lists them), not %q\n", flag.Args())
		os.Exit(2)
	}
	docPath := ""
	if *doc != "" {
		docPath = filepath.Join(*repo, *doc)
	}
	if *writeDoc {
		if docPath == "" {
			fmt.Fprintln(os.Stderr, "archcheck -write-doc needs -doc")
			os.Exit(2)
		}
		if err := velo.validate(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := WriteDoc(&velo, docPath); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("archcheck: wrote the layer table into %s\n", docPath)
		return
	}
	if err := Run(os.Stdout, *repo, docPath, &velo, processState); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Run checks the repository at repo against table t (and, with docPath set, the document's copy
// of it), printing the table and what it found to w; the error says how many problems there were.
func Run(w io.Writer, repo, docPath string, t *Table, allowed map[string]string) error {
	if err := t.validate(); err != nil {
		return err
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "archcheck: layers of %s (a package imports only lower layers; non-test files, every build)\n%s", repo, t.Text())
	pkgs, err := LoadPackages(repo)
	if err != nil {
		return err
	}
	problems := CheckImports(t, pkgs)
	if typed, err := LoadTyped(repo, t, pkgs); err != nil {
		problems = append(problems, err.Error())
	} else {
		problems = append(problems, CheckState(t, typed, allowed)...)
	}
	if docPath != "" {
		if err := CheckDoc(t, docPath); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("archcheck: %d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	fmt.Fprintf(w, "archcheck: %d packages keep to their layers; no library package keeps state at package level\n", len(pkgs))
	return nil
}
