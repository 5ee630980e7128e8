package rendezvous

import (
	"errors"
	"strings"
	"testing"
)

// FuzzHandleText: Handle's text decoder — handles travel in JSON and on command lines — never
// panics, refuses anything but a handle's hex with an error wrapping ErrBadHandle and leaves the
// handle as it was, and what it accepts re-encodes to the same handle. The seeds (and
// testdata/fuzz/FuzzHandleText) run as ordinary tests.
func FuzzHandleText(f *testing.F) {
	good, _ := Handle{Owner: 0xfeed, Slot: 3, Nonce: 0x9e3779b97f4a7c15, Size: 8 << 20}.MarshalText()
	for _, s := range []string{
		string(good),
		strings.ToUpper(string(good)),
		string(good[:len(good)-1]),                         // odd length
		string(good[:len(good)-2]),                         // one byte short
		string(good) + "00",                                // one byte long
		"02" + string(good[2:]),                            // another version
		"01" + strings.Repeat("0", 16) + string(good[18:]), // owner 0
		"zz", "", " " + string(good),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keep := Handle{Owner: 1, Slot: 2, Nonce: 3, Size: 4}
		h := keep
		err := h.UnmarshalText(b)
		if err != nil {
			if !errors.Is(err, ErrBadHandle) {
				t.Fatalf("%q: error does not wrap ErrBadHandle: %v", b, err)
			}
			if h != keep {
				t.Fatalf("%q: a refused input changed the handle to %+v", b, h)
			}
			return
		}
		if h.Owner == 0 {
			t.Fatalf("%q: accepted a handle of owner 0", b)
		}
		text, err := h.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var g Handle
		if err := g.UnmarshalText(text); err != nil || g != h {
			t.Fatalf("round trip of %q: %+v -> %s -> %+v, %v", b, h, text, g, err)
		}
		if !strings.EqualFold(string(text), string(b)) {
			t.Fatalf("%q decoded to %+v, which encodes as %s", b, h, text)
		}
	})
}
