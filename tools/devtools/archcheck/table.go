package main

import (
	"fmt"
	"sort"
	"strings"
)

// Kind says what a row's packages are for. The state check reads library packages only.
type Kind int

const (
	Library Kind = iota // what a program using the repository's modules links
	Kit                 // real components for tests, never imported by the library
	Program             // support of programs and tests, imported by nothing of the library
)

func (k Kind) String() string {
	switch k {
	case Library:
		return "library"
	case Kit:
		return "test kit"
	default:
		return "program"
	}
}

// Row is a group of packages of one layer.
type Row struct {
	Layer    int
	Kind     Kind
	Name     string
	Packages []string // relative to Table.Module; "x/..." names x and every package below it
	Owns     string
}

// Table is the layer table of a repository.
type Table struct {
	Module string // the import path the rows' packages are relative to
	Rows   []Row
}

// rel is the import path p relative to the table's module ("." for the module itself), and
// whether p is inside it.
func (t *Table) rel(p string) (string, bool) {
	if p == t.Module {
		return ".", true
	}
	r, ok := strings.CutPrefix(p, t.Module+"/")
	return r, ok
}

// lookup finds the row naming package p (a full import path): an exact name before a pattern,
// the longest pattern first.
func (t *Table) lookup(p string) (*Row, bool) {
	r, ok := t.rel(p)
	if !ok {
		return nil, false
	}
	var best *Row
	bestLen := -1
	for i := range t.Rows {
		for _, name := range t.Rows[i].Packages {
			if name == r {
				return &t.Rows[i], true
			}
			if base, ok := strings.CutSuffix(name, "/..."); ok && (r == base || strings.HasPrefix(r, base+"/")) && len(base) > bestLen {
				best, bestLen = &t.Rows[i], len(base)
			}
		}
	}
	return best, best != nil
}

// validate refuses a table that names a package twice or orders its rows other than from the top
// layer down, so the printed table reads the way the rule does.
func (t *Table) validate() error {
	seen := map[string]bool{}
	for i, row := range t.Rows {
		if row.Layer < 1 {
			return fmt.Errorf("layer table: row %q has layer %d; layers start at 1", row.Name, row.Layer)
		}
		if i > 0 && row.Layer > t.Rows[i-1].Layer {
			return fmt.Errorf("layer table: row %q (layer %d) comes after layer %d; list the rows from the top layer down", row.Name, row.Layer, t.Rows[i-1].Layer)
		}
		for _, p := range row.Packages {
			if seen[p] {
				return fmt.Errorf("layer table: %s is named twice; a package sits in one row", p)
			}
			seen[p] = true
		}
	}
	return nil
}

// Markdown is the table as docs/architecture.md prints it.
func (t *Table) Markdown() string {
	var b strings.Builder
	b.WriteString("| layer | packages | kind | owns |\n|---|---|---|---|\n")
	for _, row := range t.Rows {
		names := make([]string, len(row.Packages))
		for i, p := range row.Packages {
			names[i] = "`" + p + "`"
		}
		fmt.Fprintf(&b, "| %d %s | %s | %s | %s |\n", row.Layer, row.Name, strings.Join(names, ", "), row.Kind, row.Owns)
	}
	return b.String()
}

// Text is the table as the check prints it.
func (t *Table) Text() string {
	var b strings.Builder
	for _, row := range t.Rows {
		pkgs := append([]string(nil), row.Packages...)
		sort.Strings(pkgs)
		fmt.Fprintf(&b, "  %d %-18s %s\n", row.Layer, row.Name, strings.Join(pkgs, " "))
	}
	return b.String()
}
