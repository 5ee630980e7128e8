package velo

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzPeerInfoJSON: the JSON decoder of PeerInfo — what an instance reads from a file or a
// registry another process wrote — never panics, refuses anything malformed with an error wrapping
// ErrInvalidEndpoint and leaves the value as it was, and what it accepts is a valid PeerInfo that
// survives both encodings unchanged. The seeds (and testdata/fuzz/FuzzPeerInfoJSON) run as
// ordinary tests.
func FuzzPeerInfoJSON(f *testing.F) {
	good, _ := PeerInfo{ID: 0x1234, Incarnation: 7, Addresses: map[string][]byte{"tcp": []byte{1, 3, 'a', ':', '1'}, "ucx": {2, 0, 0}}}.MarshalJSON()
	for _, s := range []string{
		string(good),
		`{"id":"00000000000000ff","incarnation":"0","addresses":{"tcp":"AQ=="}}`,
		`{"id":"0","incarnation":"0","addresses":{"tcp":"AQ=="}}`,                            // id 0
		`{"id":"ffffffffffffffffff","incarnation":"1","addresses":{"tcp":"AQ=="}}`,           // overflows 64 bits
		`{"id":"-1","incarnation":"1","addresses":{"tcp":"AQ=="}}`,                           // sign
		`{"id":"01","incarnation":"01","addresses":{"":"AQ=="}}`,                             // empty transport name
		`{"id":"01","incarnation":"01","addresses":{"tcp":""}}`,                              // empty blob
		`{"id":"01","incarnation":"01","addresses":{"tcp":"!!"}}`,                            // not base64
		`{"id":"01","incarnation":"01","addresses":null}`,                                    // no addresses
		`{"id":"01","incarnation":"01","addresses":{"a":"AQ==","a":"Ag=="}}`,                 // duplicate key
		`{"id":1,"incarnation":"01","addresses":{"tcp":"AQ=="}}`,                             // wrong type
		`{"id":"01","incarnation":"01","addresses":{"tcp":"AQ=="},"extra":[1,2,{"x":null}]}`, // unknown field
		`[]`, `null`, `{`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keep := PeerInfo{ID: 99, Incarnation: 98, Addresses: map[string][]byte{"tcp": {1}}}
		p := keep
		err := p.UnmarshalJSON(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidEndpoint) {
				t.Fatalf("%q: error does not wrap ErrInvalidEndpoint: %v", b, err)
			}
			if !reflect.DeepEqual(p, keep) {
				t.Fatalf("%q: a refused input changed the value: %+v", b, p)
			}
			return
		}
		if err := p.validate(); err != nil {
			t.Fatalf("%q: accepted an invalid peer info: %v", b, err)
		}
		j, err := p.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var q PeerInfo
		if err := q.UnmarshalJSON(j); err != nil || !samePeerInfo(p, q) {
			t.Fatalf("JSON round trip of %q: %+v -> %s -> %+v, %v", b, p, j, q, err)
		}
		bin, err := p.MarshalBinary()
		if err != nil {
			t.Fatalf("%+v accepted from JSON does not encode in binary: %v", p, err)
		}
		var r PeerInfo
		if err := r.UnmarshalBinary(bin); err != nil || !samePeerInfo(p, r) {
			t.Fatalf("binary round trip: %+v -> %+v, %v", p, r, err)
		}
	})
}

func samePeerInfo(a, b PeerInfo) bool {
	if a.ID != b.ID || a.Incarnation != b.Incarnation || len(a.Addresses) != len(b.Addresses) {
		return false
	}
	for k, v := range a.Addresses {
		if w, ok := b.Addresses[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
