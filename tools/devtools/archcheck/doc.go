package main

import (
	"fmt"
	"os"
	"strings"
)

// The layer table in a document sits between these two lines; archcheck writes what is between.
const (
	docBegin = "<!-- layers: the table of tools/devtools/archcheck/layers.go, written by `make layers-doc`; make lint checks it -->"
	docEnd   = "<!-- end of layers -->"
)

// readDoc reads the document at path and finds its layer table: the text between the markers.
func readDoc(path string) (doc string, start, end int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, 0, err
	}
	doc = string(data)
	b := strings.Index(doc, docBegin)
	e := strings.Index(doc, docEnd)
	if b < 0 || e < b || strings.Count(doc, docBegin) != 1 || strings.Count(doc, docEnd) != 1 {
		return "", 0, 0, fmt.Errorf("%s: it needs the layer table between one line\n  %s\nand one line\n  %s", path, docBegin, docEnd)
	}
	return doc, b + len(docBegin) + 1, e, nil
}

// CheckDoc reports whether the document at path prints table t as it is.
func CheckDoc(t *Table, path string) error {
	doc, start, end, err := readDoc(path)
	if err != nil {
		return err
	}
	if doc[start:end] != t.Markdown() {
		return fmt.Errorf("%s prints another layer table than tools/devtools/archcheck/layers.go: run make layers-doc and commit the result", path)
	}
	return nil
}

// WriteDoc writes table t into the document at path, between the markers.
func WriteDoc(t *Table, path string) error {
	doc, start, end, err := readDoc(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc[:start]+t.Markdown()+doc[end:]), 0o644)
}
