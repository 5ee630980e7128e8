package ucx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// tcpKey is what UCX 1.13 packs for a registration over tcp: md map 0x1, host memory,
// one empty memory-domain key.
var tcpKey = []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// ibLikeKey has two memory domains with keys of 8 and 4 bytes.
var ibLikeKey = []byte{0x6, 0, 0, 0, 0, 0, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 4, 9, 9, 9, 9}

func TestValidateUCXKey(t *testing.T) {
	for _, ok := range [][]byte{tcpKey, ibLikeKey, append(append([]byte(nil), tcpKey...), 3, 0, 0)} {
		if err := validateUCXKey(ok, 5); err != nil {
			t.Errorf("%x: %v", ok, err)
		}
	}
	bad := map[string][]byte{
		"empty":                    {},
		"short header":             tcpKey[:8],
		"entry size missing":       tcpKey[:9],
		"entry runs past end":      ibLikeKey[:15],
		"second entry missing":     ibLikeKey[:18],
		"memory type out of range": {0, 0, 0, 0, 0, 0, 0, 0, 9},
		"all 0xff":                 bytes.Repeat([]byte{0xff}, 64),
		"huge":                     make([]byte, ucxKeyMaxLen+1),
		"trailer too long":         append(append([]byte(nil), tcpKey...), make([]byte, ucxKeyMaxTrailer+1)...),
	}
	for name, b := range bad {
		if err := validateUCXKey(b, 5); !errors.Is(err, ErrInvalidRemoteKey) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestSealedKeyRoundTrip(t *testing.T) {
	k := SealedKey{Slot: 7, Token: 0x1122334455667788, Base: 0x7f0000001000, Length: 1 << 20, UCXKey: ibLikeKey}
	b := AppendSealedKey([]byte("prefix"), k)[len("prefix"):]
	got, err := ParseSealedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Slot != k.Slot || got.Token != k.Token || got.Base != k.Base || got.Length != k.Length || !bytes.Equal(got.UCXKey, k.UCXKey) {
		t.Fatalf("round trip: %+v != %+v", got, k)
	}
	if !got.Covers(k.Base, k.Length) || !got.Covers(k.Base+k.Length, 0) || got.Covers(k.Base+k.Length-1, 2) || got.Covers(k.Base-1, 1) || got.Covers(k.Base+1, ^uint64(0)) {
		t.Fatal("Covers is wrong at the edges")
	}
}

func TestSealedKeyRefusals(t *testing.T) {
	good := AppendSealedKey(nil, SealedKey{Slot: 1, Token: 2, Base: 4096, Length: 4096, UCXKey: tcpKey})
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	reseal := func(b []byte) []byte {
		body := b[:len(b)-4]
		return AppendCRC(body)
	}
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:20],
		"bad magic":      mut(func(b []byte) []byte { b[0] = 'X'; return reseal(b) }),
		"other version":  mut(func(b []byte) []byte { b[3] = 2; return reseal(b) }),
		"reserved set":   mut(func(b []byte) []byte { b[5] = 1; return reseal(b) }),
		"length lies":    mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 11); return reseal(b) }),
		"checksum":       mut(func(b []byte) []byte { b[30] ^= 0x80; return b }),
		"truncated":      good[:len(good)-1],
		"extended":       append(append([]byte(nil), good...), 0),
		"wrapping range": mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[24:], ^uint64(0)-10); return reseal(b) }),
		"bad UCX key":    AppendSealedKey(nil, SealedKey{UCXKey: []byte{0xff, 0xff}}),
	}
	for name, b := range cases {
		if _, err := ParseSealedKey(b); !errors.Is(err, ErrInvalidRemoteKey) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// AppendCRC re-seals a modified envelope body (test helper).
func AppendCRC(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(body, crc32Castagnoli(body))
}

func FuzzParseSealedKey(f *testing.F) {
	f.Add(AppendSealedKey(nil, SealedKey{Slot: 1, Token: 2, Base: 4096, Length: 4096, UCXKey: tcpKey}))
	f.Add(AppendSealedKey(nil, SealedKey{Slot: 9, Token: 1, Base: 1, Length: 1, UCXKey: ibLikeKey}))
	f.Add([]byte("VRK\x01"))
	f.Add(bytes.Repeat([]byte{0xff}, 60))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseSealedKey(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidRemoteKey) {
				t.Fatalf("error %v does not wrap ErrInvalidRemoteKey", err)
			}
			return
		}
		// Whatever parses re-encodes to the same bytes and has a valid UCX key.
		if again := AppendSealedKey(nil, k); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
		if err := validateUCXKey(k.UCXKey, maxKnownMemTypes); err != nil {
			t.Fatalf("parsed key has an invalid UCX part: %v", err)
		}
	})
}

func FuzzValidateUCXKey(f *testing.F) {
	f.Add(tcpKey)
	f.Add(ibLikeKey)
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := validateUCXKey(b, 5); err != nil {
			return
		}
		// Accepted keys walk to within their length: recompute independently.
		mdMap := binary.LittleEndian.Uint64(b)
		off := 9
		for i := 0; i < 64; i++ {
			if mdMap&(1<<i) == 0 {
				continue
			}
			if off >= len(b) {
				t.Fatalf("accepted a key whose entries run past its end")
			}
			off += 1 + int(b[off])
		}
		if off > len(b) {
			t.Fatalf("accepted a key whose entries run past its end")
		}
	})
}
