package rdma

import (
	"bytes"
	"errors"
	"testing"
)

func TestDescriptorRoundTrip(t *testing.T) {
	d := Descriptor{Addr: 0x7f00_1234_5000, Length: 8 << 20, RKey: bytes.Repeat([]byte{7}, 200)}
	b, err := AppendDescriptor(nil, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDescriptor(b)
	if err != nil || got.Addr != d.Addr || got.Length != d.Length || !bytes.Equal(got.RKey, d.RKey) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := map[string][]byte{
		"empty":     nil,
		"short":     b[:10],
		"version":   append([]byte{2}, b[1:]...),
		"trailing":  append(append([]byte(nil), b...), 0),
		"truncated": b[:len(b)-1],
		"zero len":  mustDesc(t, func(x []byte) { clear(x[9:17]) }, b),
		"zero key":  mustDesc(t, func(x []byte) { clear(x[17:19]) }, b)[:descriptorHeaderLen],
		"wraps":     mustDesc(t, func(x []byte) { copy(x[1:9], bytes.Repeat([]byte{0xff}, 8)) }, b),
	}
	for name, in := range bad {
		if _, err := DecodeDescriptor(in); !errors.Is(err, ErrDescriptor) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, d := range []Descriptor{{Length: 0, RKey: []byte{1}}, {Length: 1}, {Length: 1, RKey: make([]byte, MaxRKeyLen+1)}} {
		if _, err := AppendDescriptor(nil, d); !errors.Is(err, ErrDescriptor) {
			t.Errorf("encoded %+v", d)
		}
	}
}

func mustDesc(t *testing.T, f func([]byte), b []byte) []byte {
	t.Helper()
	c := append([]byte(nil), b...)
	f(c)
	return c
}

func TestOffer(t *testing.T) {
	if err := checkOffer(offerBlob()); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{nil, {0}, {2}, {1, 0}} {
		if err := checkOffer(b); !errors.Is(err, ErrDescriptor) {
			t.Errorf("offer %x accepted", b)
		}
	}
}

// FuzzDecodeDescriptor: the decoder never panics, and what it accepts re-encodes to the same bytes.
func FuzzDecodeDescriptor(f *testing.F) {
	b, _ := AppendDescriptor(nil, Descriptor{Addr: 4096, Length: 100, RKey: []byte("key")})
	f.Add(b)
	f.Add([]byte{1})
	f.Add(make([]byte, descriptorHeaderLen))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := DecodeDescriptor(in)
		if err != nil {
			return
		}
		out, err := AppendDescriptor(nil, d)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("accepted %x but re-encodes to %x (%v)", in, out, err)
		}
	})
}

func FuzzCheckOffer(f *testing.F) {
	f.Add(offerBlob())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		if checkOffer(in) == nil && !bytes.Equal(in, offerBlob()) {
			t.Fatalf("accepted offer %x", in)
		}
	})
}
