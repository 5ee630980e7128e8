// Package low is the bottom layer of the fixture. What it declares at package level is what the
// state check lets pass.
package low

import (
	"errors"
	"hash/crc32"
	"regexp"
	"sync"
)

// ErrLow is a sentinel error.
var ErrLow = errors.New("low")

// names is a table nothing writes.
var names = map[int]string{1: "one"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var word = regexp.MustCompile(`\w+`)

var scratch = sync.Pool{New: func() any { return new([64]byte) }}

// Name looks up the table.
func Name(i int) string { return names[i] }

// Sum checksums b.
func Sum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Word reports whether s is a word.
func Word(s string) bool {
	buf := scratch.Get().(*[64]byte)
	defer scratch.Put(buf)
	return word.MatchString(s)
}
